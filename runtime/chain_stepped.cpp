#include "runtime/chain_stepped.hpp"

#include <algorithm>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <utility>

#include "generator/step_source.hpp"
#include "runtime/chain_step_products.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/events.hpp"
#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/product_workspace_bound.hpp"
#include "runtime/scratch.hpp"
#include "runtime/side_streams.hpp"
#include "runtime/tuner/build_ahead.hpp"
#include "runtime/tuner/policy.hpp"
#include "support/checked_size.hpp"

namespace jitbmm {

std::size_t SteppedChain::bytes_of(std::initializer_list<int64_t> sizes) {
  return std::size_t(checked_product(sizes, "chain: workspace"));
}

// The forward's scratch, counted and taken in one order: for each pass (the forward messages', and with saved the
// backward messages', which run beside them) its messages ([B][C]) and the product they reach ([parts][B][C]), the
// offsets so far, the widened table and its products' own scratch (exp_matmul's factors: the caller's workspace holds
// it too); then max_plus's winning sources ([T][B][C] int32, with a path). Stacked passes (one product a position for
// both) take one set, each piece the two passes' side by side: messages [B][2][C], reached [2][parts][B][C], offsets
// [2][B], tables [2][C][C]. Fused passes take a table and a FusedSteps scratch each, which they share where they run
// one after the other on one stream.
struct SteppedChain::ForwardPieces {
  int passes;
  bool stacked;
  std::size_t messages, reached, offsets, table, argmax, fused;
  std::size_t products[2];
  ForwardPieces(const ChainProblem& p, int64_t parts, bool with_saved, bool with_path, bool stacked,
                std::size_t table_bytes, std::size_t forward_products, std::size_t backward_products,
                std::size_t fused_bytes)
      : passes(with_saved && !stacked ? 2 : 1), stacked(stacked),
        messages(fused_bytes ? 0 : bytes_of({stacked ? 2 : 1, p.B, p.C, dtype_info(p.dtype).acc_bytes})),
        reached(fused_bytes ? 0 : bytes_of({stacked ? 2 : 1, parts, p.B, p.C, dtype_info(p.dtype).acc_bytes})),
        offsets(fused_bytes ? 0 : bytes_of({stacked ? 2 : 1, p.B, 8})), table((stacked ? 2 : 1) * table_bytes),
        argmax(with_path && p.semiring == Semiring::max_plus ? bytes_of({p.T, p.B, p.C, 4}) : 0),
        fused(fused_bytes), products{forward_products, backward_products} {}
  std::size_t bytes() const {
    ScratchSize size;
    for (int i = 0; i < passes; ++i)
      size.add(messages, "workspace")
          .add(reached, "workspace")
          .add(offsets, "workspace")
          .add(table, "workspace")
          .add(products[i], "workspace")
          .add(fused, "workspace");
    return size.add(argmax, "workspace").bytes();
  }
};

SteppedForm stepped_form(const ChainProblem& problem, const DeviceInfo& device, StepKernel kernel) {
  SteppedForm form;
  form.fused =
      kernel == StepKernel::rule ? default_fused_steps(problem, device.sm_count) : kernel != StepKernel::products;
  if (problem.semiring == Semiring::log && shared_table(problem)) {
    form.parts = step_parts(problem.B, problem.C, chain_output_dtype(problem), device);
    // Stacked where a pass's steps take parts (wgmma, enough sequences, not split_k's chunks: the rule's other
    // products, the warp kernel and split_k, are fitted on one pass's shape), and where the stacked product still
    // does: the two passes' tiles then fill a wave that one pass's leave short. Where they fill it whole, each pass's
    // product alone keeps the GPU busy and stacking gains nothing.
    if (form.parts > 1) {
      const int64_t both = step_parts(problem.B, problem.C, chain_output_dtype(problem), device, 2);
      if (both > 1) form.saving_parts = both;
    }
  }
  return form;
}

SteppedChain::SteppedChain(const ChainProblem& problem, std::shared_ptr<const DeviceInfo> device, bool tune_products,
                           StepKernel kernel, StrategyBuild build)
    : problem_(problem), tune_products_(tune_products), quick_(build == StrategyBuild::quick),
      sizes_only_(build == StrategyBuild::sizes), device_(std::move(device)), sides_(device_->context) {
  const bool quick = quick_;
  if (quick && (tune_products || kernel != StepKernel::products))
    throw std::logic_error("SteppedChain: a quick stand-in's products are untuned, in the products' form");
  const QuickBuild quick_build(quick);
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
  const SteppedForm form = stepped_form(problem, *device_, kernel);
  const bool streamed = kernel == StepKernel::fused_streamed;
  fused_form_ = form.fused;
  if (!form.fused) {
    parts_ = form.parts;
    stacked_parts_ = form.saving_parts;
  }
  const bool log = problem.semiring == Semiring::log;
  // The log HMM's backward: the sums over the steps where they apply, else the step module's with the transitions'
  // gradient's product.
  const bool sums = log && hmm_sums_apply(problem, device_);
  if (sums) sums_ = std::make_unique<const HmmSums>(problem, device_, nullptr);
  if (sizes_only_) return;
  // Every kernel a first forward and backward load, built at once: the step module, the fused form's passes or the
  // step products, and the log HMM's backward.
  const GeneratedKernel steps = emit_step_kernel(problem.semiring, problem.dtype, problem.form),
                        backward_steps = emit_step_kernel(problem.semiring, problem.dtype, problem.form, true);
  std::vector<GeneratedKernel> units{steps, backward_steps};
  std::vector<KernelSpec> specs;
  const auto add = [&](const Problem& q) {
    for (const KernelSpec& spec : step_product_kernels(q, *device_, tune_products_, quick_))
      specs.push_back(spec);
  };
  if (form.fused) {
    for (GeneratedKernel& unit : FusedSteps::units(problem, *device_, streamed)) units.push_back(std::move(unit));
  } else if (problem.T > 1) {
    // log's forward and backward messages (one stacked product where both passes take parts); max_plus's forward
    // with the path's back-pointers and without (a score alone): every product the plan's sizes plan.
    add(product_problem(false, !log));
    add(!log ? product_problem(false, false) : stacked_parts_ > 0 ? stacked_problem() : product_problem(true, false));
  }
  if (sums)
    units.push_back(HmmSums::unit(problem));
  else if (log && problem.form == ChainForm::hmm && problem.T > 1)
    add(edge_problem());
  build_ahead(*device_, units, specs);
  kernel_ = load_generated(*device_, steps);
  backward_kernel_ = load_generated(*device_, backward_steps);
  if (sums) sums_ = std::make_unique<const HmmSums>(problem, device_, load_generated(*device_, units.back()));
  if (form.fused) fused_ = std::make_unique<FusedSteps>(problem, *device_, streamed);
}

std::string SteppedChain::kernel_name() const {
  return fused_ ? fused_->name() : kernel_ ? kernel_->generated.name : "";
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
  if (p.B == 0) return ForwardPieces(p, 1, false, false, false, 0, 0, 0, 0);
  // The plans are made here, before a call's first launch: one that fails to compile fails the call before it has
  // launched anything. On the plan's device, whichever is current on the asking thread.
  ScopedContext scope(device_->context);
  if (fused_form_)
    return ForwardPieces(p, 1, with_saved, with_path, false, widened_bytes(), 0, 0, FusedSteps::workspace_bytes(p));
  const bool steps = p.T > 1;
  if (with_saved && stacked_parts_ > 0)
    return ForwardPieces(p, stacked_parts_, true, with_path, true, widened_bytes(),
                         steps ? product_bytes(stacked_problem(), [&] { return stacked_product(stream); }) : 0, 0, 0);
  const bool argmax = with_path && p.semiring == Semiring::max_plus;
  const std::size_t forward =
      steps ? product_bytes(product_problem(false, argmax), [&] { return product(false, argmax, stream); }) : 0;
  const std::size_t backward =
      steps && with_saved ? product_bytes(product_problem(true, false), [&] { return product(true, false, stream); })
                          : 0;
  return ForwardPieces(p, parts_, with_saved, with_path, false, widened_bytes(), forward, backward, 0);
}

std::size_t SteppedChain::product_bytes(const Problem& q, const std::function<SemiringBMM()>& plan) const {
  return sizes_only_ ? product_workspace_bound(q, *device_, step_product_kernels(q, *device_, tune_products_, quick_))
                     : plan().workspace_bytes();
}

SemiringBMM SteppedChain::kept_product(ProductKind kind, bool beta, bool argmax, const Problem& problem,
                                       Stream stream) const {
  const BuiltOnce<SemiringBMM>* kept = nullptr;
  {
    std::lock_guard<std::mutex> lock(products_mutex_);
    kept = &products_[std::make_tuple(int(kind), beta, argmax)]; // a map's entries stay where they are
  }
  return kept->get([&] {
    const TuningHold hold(!tune_products_, false); // a chain plan tunes nothing on its own
    return step_product_plan(problem, *device_, tune_products_, stream, quick_);
  });
}

SemiringBMM SteppedChain::product(bool beta, bool argmax, Stream stream) const {
  return kept_product(kStep, beta, argmax, product_problem(beta, argmax), stream);
}

Problem SteppedChain::product_problem(bool beta, bool argmax) const {
  const ChainProblem& p = problem_;
  const int64_t C = p.C;
  Problem q;
  q.semiring = p.semiring;
  q.dtype = chain_output_dtype(p);
  q.with_argmax = argmax;
  if (shared_table(p)) {
    // Every sequence's messages are a row: one product with the table (widened: row-major for both directions), its
    // sources' sum cut in parts_ consecutive ranges, a batch each.
    const int64_t k = C / parts_;
    q.shape = Shape{parts_, p.B, k, C};
    q.a_strides = Strides{parts_ > 1 ? k : p.B * C, C, 1};
    q.b_strides = Strides{k * C, C, 1};
    q.out_strides = Strides{p.B * C, C, 1};
  } else {
    // A product per sequence: its messages (a row) times its step's table, read [p][c] forward and [c][p] backward.
    q.shape = Shape{p.B, 1, C, C};
    q.a_strides = q.out_strides = Strides{C, C, 1};
    const int64_t s_b = widened() ? C * C : strides_[0], s_c = widened() ? C : strides_[2],
                  s_p = widened() ? 1 : strides_[3];
    q.b_strides = beta ? Strides{s_b, s_c, s_p} : Strides{s_b, s_p, s_c};
  }
  return q;
}

SemiringBMM SteppedChain::stacked_product(Stream stream) const {
  return kept_product(kStacked, false, false, stacked_problem(), stream);
}

Problem SteppedChain::stacked_problem() const {
  const ChainProblem& p = problem_;
  const int64_t C = p.C, k = C / stacked_parts_;
  // Batch j = pass · parts + part: its messages' sources [pass·C + part·k, +k) of each row (msg [B][2][C]), its
  // table's rows from pass·C² + part·k·C (the widened tables side by side) and its results at j·B·C (prod).
  Problem q;
  q.semiring = p.semiring;
  q.dtype = chain_output_dtype(p);
  q.shape = Shape{2 * stacked_parts_, p.B, k, C};
  q.a_strides = Strides{k, 2 * C, 1};
  q.b_strides = Strides{k * C, C, 1};
  q.out_strides = Strides{p.B * C, C, 1};
  return q;
}

void SteppedChain::launch(const char* suffix, int64_t items, bool block_per_item, jb::ChainParams& params,
                          CUstream stream, bool backward_unit) const {
  // A block per item, or a thread per item, grid-strided up to enough blocks to fill the GPU a few times.
  const int threads = step_entry_threads(suffix);
  const int64_t blocks = block_per_item ? items : (items + threads - 1) / threads;
  const unsigned grid[3] = {unsigned(std::clamp<int64_t>(blocks, 1, 32 * int64_t(std::max(1, device_->sm_count)))), 1,
                            1},
                 block[3] = {unsigned(threads), 1, 1};
  void* args[] = {&params};
  jitbmm::launch(backward_unit ? *backward_kernel_ : *kernel_, suffix, grid, block, args, stream);
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
  // One position has no step: its product is neither planned nor built.
  const std::optional<SemiringBMM> step =
      p.T > 1 ? std::optional<SemiringBMM>(product(beta, !beta && with_path, stream)) : std::nullopt;
  // The forward from position 0, each product reaching the next position; the backward from the last position
  // down, the table transposed. A shared table stays where its first step put it, and so do the factors exp_matmul
  // made of it in `products`: the steps after the first prepare the messages alone.
  const bool same_table = shared_table(p);
  for (int64_t i = 0; i < p.T; ++i) {
    const int64_t t = beta ? p.T - 1 - i : i;
    if (i > 0) {
      const int64_t from = beta ? t : t - 1; // the step's table: positions from → from + 1
      const void* tab = table(params, from, beta, table_scratch, cu_stream);
      int32_t* winners = !beta && with_path ? params.argmax + std::size_t(t) * row : nullptr;
      void* reached = const_cast<void*>(params.prod);
      if (same_table && i > 1)
        step->run_same_b(params.msg, tab, reached, winners, stream, products);
      else
        (*step)(params.msg, tab, reached, winners, stream, products);
    }
    params.t = t;
    launch("", p.B, true, params, cu_stream);
  }
  if (!beta && with_path) launch("_path", p.B, false, params, cu_stream);
}

void SteppedChain::stacked_passes(jb::ChainParams forward, jb::ChainParams backward, void* tables,
                                  const Workspace& products, Stream stream) const {
  const ChainProblem& p = problem_;
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  forward.beta = 0;
  backward.beta = 1;
  const std::optional<SemiringBMM> step = p.T > 1 ? std::optional<SemiringBMM>(stacked_product(stream)) : std::nullopt;
  char* const forward_table = static_cast<char*>(tables);
  char* const backward_table = forward_table + widened_bytes();
  for (int64_t i = 0; i < p.T; ++i) {
    const int64_t t = i, u = p.T - 1 - i; // the forward's position and the backward's
    if (i > 0) {
      // Each direction's table is copied at its first step (table()); the steps after it prepare the messages alone.
      table(forward, t - 1, false, forward_table, cu_stream);
      table(backward, u, true, backward_table, cu_stream);
      void* const reached = const_cast<void*>(forward.prod);
      if (i > 1)
        step->run_same_b(forward.msg, forward_table, reached, nullptr, stream, products);
      else
        (*step)(forward.msg, forward_table, reached, nullptr, stream, products);
    }
    forward.t = t;
    launch("", p.B, true, forward, cu_stream);
    backward.t = u;
    launch("", p.B, true, backward, cu_stream);
  }
}

void SteppedChain::fused_pass(jb::ChainParams params, bool beta, void* table_scratch, void* scratch, CUstream stream,
                              bool beside) const {
  const ChainProblem& p = problem_;
  params.beta = beta;
  const void* tab = p.T > 1 ? table(params, beta ? p.T - 2 : 0, beta, table_scratch, stream) : nullptr;
  fused_->pass(params, beta, tab, scratch, stream, beside);
}

void SteppedChain::forward(jb::ChainParams params, void* saved, Stream stream, const Workspace& workspace) const {
  const bool with_saved = saved != nullptr;
  const ChainProblem& p = problem_;
  if (p.B == 0) return;
  if (sizes_only_) throw_sizes_only(name());
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false);
  const bool with_path = params.path != nullptr;
  const ForwardPieces sizes = pieces(with_saved, with_path, stream);
  Scratch scratch(*device_, workspace, sizes.bytes(), cu_stream);
  params.states = p.C;
  params.msg_row = p.C;
  if (sizes.stacked) {
    // One set of pieces, each the two passes' side by side (ForwardPieces).
    const std::size_t acc = std::size_t(dtype_info(p.dtype).acc_bytes);
    jb::ChainParams forward = params, backward = params;
    char* const msg = static_cast<char*>(scratch.take(sizes.messages));
    char* const prod = static_cast<char*>(scratch.take(sizes.reached));
    auto* const running = static_cast<double*>(scratch.take(sizes.offsets));
    void* const tables = scratch.take(sizes.table);
    const Workspace products{scratch.take(sizes.products[0]), sizes.products[0]};
    forward.msg_row = backward.msg_row = 2 * p.C;
    forward.parts = backward.parts = stacked_parts_;
    forward.msg = msg;
    backward.msg = msg + std::size_t(p.C) * acc;
    forward.prod = prod;
    backward.prod = prod + std::size_t(stacked_parts_ * p.B * p.C) * acc;
    forward.running = running;
    backward.running = running + p.B;
    stacked_passes(forward, backward, tables, products, stream);
    return;
  }
  jb::ChainParams at[2] = {params, params};
  void* tables[2] = {};
  void* fused[2] = {};
  Workspace products[2];
  for (int i = 0; i < sizes.passes; ++i) {
    at[i].msg = scratch.take(sizes.messages);
    at[i].prod = scratch.take(sizes.reached);
    at[i].parts = parts_;
    at[i].running = static_cast<double*>(scratch.take(sizes.offsets));
    tables[i] = scratch.take(sizes.table);
    products[i] = Workspace{scratch.take(sizes.products[i]), sizes.products[i]};
    fused[i] = scratch.take(sizes.fused);
  }
  at[0].argmax = static_cast<int*>(scratch.take(sizes.argmax));
  params.argmax = at[0].argmax;
  if (!with_saved) {
    if (fused_)
      fused_pass(params, false, tables[0], fused[0], cu_stream);
    else
      pass(at[0], false, with_path, tables[0], products[0], stream);
    return;
  }
  // The backward messages depend on the tables alone: on a stream of their own they run beside the forward's, whose
  // products alone leave SMs idle at moderate sizes, as do the fused passes where both fit the GPU at once
  // (FusedSteps::side_by_side); not while `stream` is captured into a graph, where the capture's one stream keeps the
  // order, nor past SideStreams::kMax caller streams. Fused passes one after the other share one scratch.
  const bool beside = (!fused_ || fused_->side_by_side()) && !stream_is_capturing(cu_stream);
  const CUstream side = beside ? sides_.of(cu_stream) : nullptr;
  const auto run = [&](int i, CUstream on) {
    const int own = fused_ && !side ? 0 : i; // the pass's table and fused scratch
    if (fused_)
      fused_pass(params, i == 1, tables[own], fused[own], on, side != nullptr);
    else
      pass(at[i], i == 1, i == 0 && with_path, tables[i], products[i], reinterpret_cast<Stream>(on));
  };
  if (!side) {
    run(0, cu_stream);
    run(1, cu_stream);
    return;
  }
  wait_for(side, cu_stream);
  const JoinOnExit join{cu_stream, side}; // before the scratch is given back, on every way out
  run(1, side);
  run(0, cu_stream);
}

} // namespace jitbmm
