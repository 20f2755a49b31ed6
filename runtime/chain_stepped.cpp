#include "runtime/chain_stepped.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "generator/chain_source.hpp"
#include "runtime/chain_step_products.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/events.hpp"
#include "runtime/launch.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/policy.hpp"
#include "support/checked_size.hpp"

namespace jitbmm {

namespace {

// The product kinds a plan keeps.
enum ProductKind { kStep = 0, kEdges = 1 };

bool shared_table(const ChainProblem& p) { return p.form == ChainForm::hmm && !p.batched_transitions; }

std::size_t bytes_of(std::initializer_list<int64_t> sizes) {
  return std::size_t(checked_product(sizes, "chain: workspace"));
}

// Makes the caller's stream wait for the side stream when it leaves scope, however it leaves: the scratch the side
// stream's pass uses is given back on the caller's stream after that.
struct JoinOnExit {
  CUstream stream, side;
  ~JoinOnExit() {
    try {
      wait_for(stream, side);
    } catch (...) { // a failed wait leaves the error of the call that failed first to its caller
    }
  }
};

} // namespace

namespace {

// A position's column tiles (states) of the fused form, and all its tiles.
int64_t fused_column_tiles(const ChainProblem& p) { return (p.C + jb::kFusedCols - 1) / jb::kFusedCols; }
int64_t fused_tiles(const ChainProblem& p) { return (p.B + jb::kFusedRows - 1) / jb::kFusedRows * fused_column_tiles(p); }

} // namespace

bool fused_steps_apply(const ChainProblem& p) {
  return shared_table(p) && (p.semiring == Semiring::log || p.semiring == Semiring::max_plus) && p.dtype != DType::f64;
}

bool default_fused_steps(const ChainProblem& p, int sm_count) {
  // The fused form runs on CUDA cores, a block of 32 × 64 outputs an SM: it wins against a product and its launches
  // a position where each SM has at most one such tile of a step and there are enough of them (up to about 576
  // states its resident entries keep the tile's table side in shared memory); with more tiles than SMs a block forms
  // several one after another, and the log products' tensor cores win. Fewer than 64 sequences leave most of a
  // tile's rows empty; not measured, they keep the products. max_plus's fused form takes more instructions a term
  // than log's one multiply-add (a max, and a source kept a four), so a step of its own is no faster than the tiled
  // max-plus product; but it keeps the back-pointers at little cost, where the product that keeps them is much
  // slower. Rated with the path (a Viterbi decode, and the backward, read it), it wins from 128 states up to two
  // tiles an SM. Fitted on jitbmm bench --chain C --hmm --stepped on an H200 (132 SMs, T = 32; bench/RESULTS.md).
  const int64_t tiles = fused_tiles(p), sms = std::max(1, sm_count);
  if (p.semiring == Semiring::max_plus)
    return fused_steps_apply(p) && p.B >= 64 && p.C >= 128 && tiles >= 32 && tiles <= 2 * sms;
  return fused_steps_apply(p) && p.B >= 64 && tiles >= 32 && tiles <= sms;
}

// A fused pass's scratch after its table, counted and carved in one order (templates/chain/params.cuh names them).
struct SteppedChain::FusedPieces {
  std::size_t sizes[10];
  explicit FusedPieces(const ChainProblem& p) {
    const int64_t tiles = fused_column_tiles(p);
    const bool log = p.semiring == Semiring::log;
    const int64_t factors = p.T > 1 && log ? p.C : 0; // no step, no table; max_plus reads the table itself
    // The barriers: a slot of 64 words for the grid, one for each row of tiles.
    const int64_t barriers = 1 + (p.B + jb::kFusedRows - 1) / jb::kFusedRows;
    const std::size_t list[10] = {bytes_of({factors, p.C, 4}),  bytes_of({p.C, 4}),      bytes_of({2, p.B, p.C, 4}),
                                  bytes_of({2, p.B, tiles, 4}), bytes_of({p.B, tiles, 4}), bytes_of({log ? 0 : p.B, tiles, 4}),
                                  bytes_of({p.B, 4}),           bytes_of({p.B, 8}),        bytes_of({2, p.B, 8}),
                                  bytes_of({barriers, 64, 4})};
    std::copy(std::begin(list), std::end(list), sizes);
  }
  std::size_t bytes() const {
    ScratchSize size;
    for (const std::size_t n : sizes) size.add(n, "workspace");
    return size.bytes();
  }
  void carve(char* at, jb::ChainParams& q) const {
    void* pieces[10];
    for (int i = 0; i < 10; ++i) { // null where the semiring takes no such piece
      pieces[i] = sizes[i] ? at : nullptr;
      at += ScratchSize().add(sizes[i], "workspace").bytes();
    }
    q.factors = pieces[0];
    q.col_max = pieces[1];
    q.msg = pieces[2];
    q.row_maxima = pieces[3];
    q.row_sums = pieces[4];
    q.row_args = static_cast<int*>(pieces[5]);
    q.ends = pieces[6];
    q.end_offsets = static_cast<double*>(pieces[7]);
    q.offsets = static_cast<double*>(pieces[8]);
    q.barrier = static_cast<unsigned*>(pieces[9]);
  }
};

// The forward's scratch, counted and taken in one order: for each pass (the forward messages', and with saved the
// backward messages', which run beside them) its messages and the product they reach ([B][C] each), the offsets so
// far, the widened table and its products' own scratch (exp_matmul's factors: the caller's workspace holds it too);
// then max_plus's winning sources ([T][B][C] int32, with a path). Fused passes, which run one after the other on one
// stream, share one table and one FusedPieces.
struct SteppedChain::ForwardPieces {
  int passes;
  std::size_t messages, offsets, table, argmax, fused;
  std::size_t products[2];
  ForwardPieces(const ChainProblem& p, bool with_saved, bool with_path, std::size_t table_bytes,
                std::size_t forward_products, std::size_t backward_products, std::size_t fused_bytes)
      : passes(with_saved && !fused_bytes ? 2 : 1),
        messages(fused_bytes ? 0 : bytes_of({p.B, p.C, dtype_info(p.dtype).acc_bytes})),
        offsets(fused_bytes ? 0 : bytes_of({p.B, 8})), table(table_bytes),
        argmax(with_path && p.semiring == Semiring::max_plus ? bytes_of({p.T, p.B, p.C, 4}) : 0), fused(fused_bytes),
        products{forward_products, backward_products} {}
  std::size_t bytes() const {
    ScratchSize size;
    for (int i = 0; i < passes; ++i)
      size.add(messages, "workspace")
          .add(messages, "workspace")
          .add(offsets, "workspace")
          .add(table, "workspace")
          .add(products[i], "workspace")
          .add(fused, "workspace");
    return size.add(argmax, "workspace").bytes();
  }
};

SteppedChain::SteppedChain(const ChainProblem& problem, std::shared_ptr<const DeviceInfo> device, bool tune_products,
                           StepKernel kernel)
    : problem_(problem), tune_products_(tune_products), device_(std::move(device)) {
  if ((kernel == StepKernel::fused || kernel == StepKernel::fused_streamed) && !fused_steps_apply(problem))
    throw std::invalid_argument("steps: the fused steps compute log and max_plus HMMs with one shared transition "
                                "table, inputs of f32, f16 or bf16");
  chain_strides(problem, strides_);
  if (problem.form == ChainForm::hmm) {
    const HmmStrides h = hmm_strides(problem);
    strides_[0] = h.transitions[0];
    strides_[1] = 0;
    strides_[2] = h.transitions[1];
    strides_[3] = h.transitions[2];
  }
  if (problem.B == 0) return;
  kernel_ = load_generated(*device_, emit_step_kernel(problem.semiring, problem.dtype, problem.form));
  if (kernel == StepKernel::products || (kernel == StepKernel::rule && !default_fused_steps(problem, device_->sm_count)))
    return;
  fused_kernel_ = load_generated(*device_, emit_fused_step_kernel(problem.semiring, problem.dtype));
  ScopedContext scope(device_->context);
  const int64_t tiles = fused_tiles(problem), sms = std::max(1, device_->sm_count);
  // Every block resident at once (the grid barrier), each owning its tiles for the whole pass: `threads` and
  // `shared` bytes of dynamic shared memory a block, the passes' entries of `prefix`.
  auto blocks = [&](const std::string& prefix, int threads, unsigned shared) {
    int per_sm = 1 << 30;
    for (const char* direction : {"", "_beta"}) {
      if (direction[0] && problem.semiring != Semiring::log) break; // max_plus has no backward messages
      const CUfunction f = fused_kernel_->entry(prefix + direction);
      int n = 0, fixed = 0;
      check(driver().cuFuncGetAttribute(&fixed, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f), "cuFuncGetAttribute");
      if (shared && int64_t(shared) + fixed > device_->max_shared_per_block_optin) return int64_t(0);
      if (shared)
        check(driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared)),
              "cuFuncSetAttribute");
      check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, threads, shared),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor");
      per_sm = std::min(per_sm, n);
    }
    return int64_t(per_sm) * sms;
  };
  // The resident entries where every tile can have a block to itself with its table's side in shared memory: the
  // sources of a product are then read from shared memory alone.
  const auto resident = unsigned(jb::fused_resident_floats(problem.C) * int64_t(sizeof(float)));
  const int threads = jb::fused_resident_threads(problem.semiring == Semiring::log);
  if (kernel != StepKernel::fused_streamed && blocks("_resident", threads, resident) >= tiles) {
    fused_prefix_ = "_resident";
    fused_block_ = threads;
    fused_shared_ = resident;
    fused_grid_ = int(tiles);
    return;
  }
  fused_grid_ = int(std::clamp<int64_t>(tiles, 1, std::max<int64_t>(1, blocks("", jb::kFusedBlock, 0))));
}

std::string SteppedChain::kernel_name() const {
  return fused_kernel_ ? fused_kernel_->generated.name : kernel_ ? kernel_->generated.name : "";
}

// A shared table is copied transposed for the forward (the products read their right operand row-major best) and
// as it is for the backward, C² values; the other forms read their tables where they are, unless they are of a
// half type (the products take one dtype, the messages').
bool SteppedChain::widened() const { return shared_table(problem_) || chain_output_dtype(problem_) != problem_.dtype; }

std::size_t SteppedChain::widened_bytes() const {
  if (!widened() || problem_.T < 2) return 0;
  const int64_t tables = shared_table(problem_) ? 1 : problem_.B;
  return bytes_of({tables, problem_.C, problem_.C, dtype_info(problem_.dtype).acc_bytes});
}

std::size_t SteppedChain::workspace_bytes(bool with_saved, bool with_path) const {
  return pieces(with_saved, with_path, nullptr).bytes();
}

SteppedChain::ForwardPieces SteppedChain::pieces(bool with_saved, bool with_path, Stream stream) const {
  const ChainProblem& p = problem_;
  if (p.B == 0) return ForwardPieces(p, false, false, 0, 0, 0, 0);
  // The plans are made here, before a call's first launch: one that fails to compile fails the call before it has
  // launched anything. On the plan's device, whichever is current on the asking thread.
  ScopedContext scope(device_->context);
  if (fused_kernel_) return ForwardPieces(p, with_saved, with_path, widened_bytes(), 0, 0, FusedPieces(p).bytes());
  const bool steps = p.T > 1;
  const std::size_t forward =
      steps ? product(false, with_path && p.semiring == Semiring::max_plus, stream).workspace_bytes() : 0;
  const std::size_t backward = steps && with_saved ? product(true, false, stream).workspace_bytes() : 0;
  return ForwardPieces(p, with_saved, with_path, widened_bytes(), forward, backward, 0);
}

int64_t SteppedChain::edge_slices() const {
  const ChainProblem& p = problem_;
  if (!shared_table(p)) return 1;
  // Slices of whole sequences (a divisor of B), each summing at least 256 positions, as many as give the GPU two
  // output tiles of 128 × 128 per SM.
  const int64_t tiles = std::max<int64_t>(1, ((p.C + 127) / 128) * ((p.C + 127) / 128));
  const int64_t wanted = std::max<int64_t>(1, 2 * int64_t(std::max(1, device_->sm_count)) / tiles);
  int64_t best = 1;
  for (int64_t s = 1; s <= std::min(wanted, p.B); ++s)
    if (p.B % s == 0 && (p.B / s) * p.T >= 256) best = s;
  return best;
}

std::size_t SteppedChain::backward_workspace_bytes(bool transitions) const {
  const ChainProblem& p = problem_;
  if (p.B == 0 || p.form != ChainForm::hmm || !transitions || p.T < 2) return 0;
  ScopedContext scope(device_->context); // the products are planned on the plan's device
  const int acc = dtype_info(p.dtype).acc_bytes;
  const int64_t groups = p.batched_transitions ? p.B : 1;
  if (p.semiring == Semiring::max_plus)
    return ScratchSize().add(bytes_of({groups, p.C, p.C, acc}), "workspace").bytes();
  return ScratchSize()
      .add(bytes_of({p.B, p.T, p.C, acc}), "workspace")
      .add(bytes_of({2, edge_slices(), groups, p.C, p.C, acc}), "workspace")
      .add(edge_product(nullptr).workspace_bytes(), "workspace")
      .bytes();
}

SemiringBMM SteppedChain::product(bool beta, bool argmax, Stream stream) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_tuple(int(kStep), beta, argmax);
  if (const auto it = products_.find(key); it != products_.end()) return it->second;
  const ChainProblem& p = problem_;
  const int64_t C = p.C;
  Problem q;
  q.semiring = p.semiring;
  q.dtype = chain_output_dtype(p);
  q.with_argmax = argmax;
  if (shared_table(p)) {
    // Every sequence's messages are a row: one product with the table (widened: row-major for both directions).
    q.shape = Shape{1, p.B, C, C};
    q.a_strides = q.out_strides = Strides{p.B * C, C, 1};
    q.b_strides = Strides{C * C, C, 1};
  } else {
    // A product per sequence: its messages (a row) times its step's table, read [p][c] forward and [c][p] backward.
    q.shape = Shape{p.B, 1, C, C};
    q.a_strides = q.out_strides = Strides{C, C, 1};
    const int64_t s_b = widened() ? C * C : strides_[0], s_c = widened() ? C : strides_[2],
                  s_p = widened() ? 1 : strides_[3];
    q.b_strides = beta ? Strides{s_b, s_c, s_p} : Strides{s_b, s_p, s_c};
  }
  return products_.emplace(key, step_product_plan(q, *device_, tune_products_, stream)).first->second;
}

SemiringBMM SteppedChain::edge_product(Stream stream) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_tuple(int(kEdges), false, false);
  if (const auto it = products_.find(key); it != products_.end()) return it->second;
  const ChainProblem& p = problem_;
  const int64_t C = p.C, slices = edge_slices();
  // Out[c][q] = ⊕ over a slice's (b, t) of operand[b][t][c] ⊗ rel[b][t][q]: the operand read transposed.
  const int64_t k = p.batched_transitions ? p.T : p.B / slices * p.T;
  Problem q;
  q.semiring = Semiring::log;
  q.dtype = chain_output_dtype(p);
  q.shape = Shape{p.batched_transitions ? p.B : slices, C, k, C};
  q.a_strides = Strides{k * C, 1, C};
  q.b_strides = Strides{k * C, C, 1};
  q.out_strides = Strides{C * C, C, 1};
  return products_.emplace(key, step_product_plan(q, *device_, tune_products_, stream)).first->second;
}

void SteppedChain::launch(const char* suffix, int64_t items, bool block_per_item, jb::ChainParams& params,
                          CUstream stream) const {
  // A block per item, or a thread per item, grid-strided up to enough blocks to fill the GPU a few times.
  const int64_t blocks = block_per_item ? items : (items + kStepThreads - 1) / kStepThreads;
  const unsigned grid[3] = {unsigned(std::clamp<int64_t>(blocks, 1, 32 * int64_t(std::max(1, device_->sm_count)))), 1,
                            1},
                 block[3] = {unsigned(kStepThreads), 1, 1};
  void* args[] = {&params};
  jitbmm::launch(kernel_->entry(suffix), grid, block, args, stream, kernel_->generated.name, suffix);
}

const void* SteppedChain::table(const jb::ChainParams& params, int64_t t, bool beta, void* scratch_table,
                                CUstream stream) const {
  const ChainProblem& p = problem_;
  const char* const at = static_cast<const char*>(params.potentials) +
                         std::size_t(t * strides_[1]) * std::size_t(dtype_info(p.dtype).size_bytes);
  if (!widened()) return at;
  // The CRF form copies each step's tables; an HMM's stay the same along the chain: copied once per direction
  // (a shared table is transposed for the forward), per call for per-sequence ones.
  if (p.form == ChainForm::crf || t == (beta ? p.T - 2 : 0)) {
    jb::ChainParams w = params;
    w.potentials = at;
    w.operand = scratch_table;
    w.slices = shared_table(p) ? 1 : p.B;
    w.s_b = strides_[0];
    const bool transpose = shared_table(p) && !beta;
    w.s_c = transpose ? strides_[3] : strides_[2];
    w.s_p = transpose ? strides_[2] : strides_[3];
    launch("_widen", w.slices * p.C * p.C, false, w, stream);
  }
  return scratch_table;
}

void SteppedChain::pass(jb::ChainParams params, bool beta, bool with_path, void* table_scratch,
                        const Workspace& products, Stream stream) const {
  const ChainProblem& p = problem_;
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  const std::size_t row = std::size_t(p.B * p.C);
  params.beta = beta;
  const SemiringBMM step = product(beta, !beta && with_path, stream);
  // The forward from position 0, each product reaching the next position; the backward from the last position
  // down, the table transposed.
  for (int64_t i = 0; i < p.T; ++i) {
    const int64_t t = beta ? p.T - 1 - i : i;
    if (i > 0) {
      const int64_t from = beta ? t : t - 1; // the step's table: positions from → from + 1
      const void* tab = table(params, from, beta, table_scratch, cu_stream);
      int32_t* winners = !beta && with_path ? params.argmax + std::size_t(t) * row : nullptr;
      step(params.msg, tab, const_cast<void*>(params.prod), winners, stream, products);
    }
    params.t = t;
    launch("", p.B, true, params, cu_stream);
  }
  if (!beta && with_path) launch("_path", p.B, false, params, cu_stream);
}

void SteppedChain::fused_pass(jb::ChainParams params, bool beta, void* table_scratch, void* scratch,
                              CUstream stream) const {
  const ChainProblem& p = problem_;
  params.beta = beta;
  FusedPieces(p).carve(static_cast<char*>(scratch), params);
  if (p.T > 1) {
    params.table = table(params, beta ? p.T - 2 : 0, beta, table_scratch, stream);
    const unsigned grid[3] = {unsigned((p.C + 31) / 32), 1, 1}, block[3] = {256, 1, 1};
    void* args[] = {&params};
    jitbmm::launch(fused_kernel_->entry("_factors"), grid, block, args, stream, fused_kernel_->generated.name,
                   "_factors");
  }
  const FusedPieces pieces(p);
  check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(params.barrier), 0, pieces.sizes[9], stream),
        "cuMemsetD8Async");
  const std::string suffix = fused_prefix_ + (beta ? "_beta" : "");
  void* args[] = {&params};
  launch_cooperative(fused_kernel_->entry(suffix), unsigned(fused_grid_), unsigned(fused_block_), args, stream,
                     fused_kernel_->generated.name, suffix, fused_shared_);
}

CUstream SteppedChain::side_stream() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!side_) check(driver().cuStreamCreate(&side_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return side_;
}

SteppedChain::~SteppedChain() {
  if (!side_) return;
  // Work still queued on it completes first: the driver releases the stream then.
  ScopedContext scope(device_->context);
  driver().cuStreamDestroy(side_);
}

void SteppedChain::forward(jb::ChainParams params, bool with_saved, Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  if (p.B == 0) return;
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false);
  const bool with_path = params.path != nullptr;
  const ForwardPieces sizes = pieces(with_saved, with_path, stream);
  Scratch scratch(*device_, workspace, sizes.bytes(), cu_stream);
  params.states = p.C;
  jb::ChainParams at[2] = {params, params};
  void* tables[2] = {};
  void* fused[2] = {};
  Workspace products[2];
  for (int i = 0; i < sizes.passes; ++i) {
    at[i].msg = scratch.take(sizes.messages);
    at[i].prod = scratch.take(sizes.messages);
    at[i].running = static_cast<double*>(scratch.take(sizes.offsets));
    tables[i] = scratch.take(sizes.table);
    products[i] = Workspace{scratch.take(sizes.products[i]), sizes.products[i]};
    fused[i] = scratch.take(sizes.fused);
  }
  at[0].argmax = static_cast<int*>(scratch.take(sizes.argmax));
  if (fused_kernel_) {
    // One pass after the other, on the caller's stream: each keeps every block of the GPU resident.
    params.argmax = at[0].argmax;
    for (int i = 0; i < (with_saved ? 2 : 1); ++i) fused_pass(params, i == 1, tables[0], fused[0], cu_stream);
    return;
  }
  if (!with_saved) {
    pass(at[0], false, with_path, tables[0], products[0], stream);
    return;
  }
  // The backward messages depend on the tables alone: on a stream of their own they run beside the forward's, whose
  // products alone leave SMs idle at moderate sizes (not while `stream` is captured into a graph, where the
  // capture's one stream keeps the order).
  if (stream_is_capturing(cu_stream)) {
    pass(at[0], false, with_path, tables[0], products[0], stream);
    pass(at[1], true, false, tables[1], products[1], stream);
    return;
  }
  const CUstream side = side_stream();
  wait_for(side, cu_stream);
  const JoinOnExit join{cu_stream, side}; // before the scratch is given back, on every way out
  pass(at[1], true, false, tables[1], products[1], reinterpret_cast<Stream>(side));
  pass(at[0], false, with_path, tables[0], products[0], stream);
}

void SteppedChain::backward(jb::ChainParams params, Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  if (p.B == 0) return;
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  const bool log = p.semiring == Semiring::log;
  ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false);
  params.states = p.C;
  params.chunks = 1; // "_reduce" adds no partial sums of the transitions' gradient
  if (p.form == ChainForm::crf) {
    launch("_marginals", p.B * (p.T - 1) * p.C * p.C, false, params, cu_stream);
    return;
  }
  const bool transitions = params.grad != nullptr;
  Scratch scratch(*device_, workspace, backward_workspace_bytes(transitions), cu_stream); // plans the product first
  if (params.grad_emissions) launch("_nodes", p.B * p.T * p.C, false, params, cu_stream);
  if (params.grad_initial) launch("_reduce", (p.batched_initial ? p.B : 1) * p.C, false, params, cu_stream);
  if (!transitions) return;
  const int acc = dtype_info(p.dtype).acc_bytes;
  const int64_t groups = p.batched_transitions ? p.B : 1;
  if (p.T < 2) { // no step: a sum of nothing
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(params.grad), 0,
                                   bytes_of({groups, p.C, p.C, dtype_info(p.dtype).size_bytes}), cu_stream),
          "cuMemsetD8Async");
    return;
  }
  if (!log) {
    params.operand = scratch.take(bytes_of({groups, p.C, p.C, acc}));
    launch("_path_edges", groups * p.C / (kStepThreads / 32) + 1, true, params, cu_stream);
    launch("_cast", groups * p.C * p.C, false, params, cu_stream);
    return;
  }
  // The positive and the negative parts of grad_score, each a product of its operand with the saved messages.
  params.operand = scratch.take(bytes_of({p.B, p.T, p.C, acc}));
  char* const products = static_cast<char*>(scratch.take(bytes_of({2, edge_slices(), groups, p.C, p.C, acc})));
  const std::size_t part = bytes_of({edge_slices(), groups, p.C, p.C, acc});
  const SemiringBMM edges = edge_product(stream);
  const Workspace edge_scratch{scratch.take(edges.workspace_bytes()), edges.workspace_bytes()};
  for (const int sign : {1, -1}) {
    params.sign = sign;
    launch("_operand", p.B * p.T * p.C, false, params, cu_stream);
    edges(params.operand, params.rel, products + (sign > 0 ? 0 : part), nullptr, stream, edge_scratch);
  }
  params.products = products;
  params.slices = edge_slices();
  launch("_finish", groups * p.C * p.C, false, params, cu_stream);
}

} // namespace jitbmm
