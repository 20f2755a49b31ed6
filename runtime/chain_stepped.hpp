// The stepped strategy of a chain (docs/chains-design.md, "The stepped strategy"): all B sequences advance one
// position at a time, and each step's B·C² terms are one product of the bmm plans — [B × C] · [C × C] for an HMM's
// shared transitions, B products [1 × C] · [C × C] for per-sequence tables and the CRF form — so a wide batch runs on
// the products' kernels (for log, exp_matmul's tensor cores with its guard and exact repair) and C has no bound of
// the sequential kernels' (templates/chain/steps.cuh has the rest). The backward messages are the same products with
// the table transposed; the HMM log backward's transitions' gradient is one product of the saved messages over
// every (b, t), or where they take less time the sequential kernels' sums over the steps (runtime/hmm_sums.hpp), so
// nothing of size B·T·C² is formed. It pays where many sequences share a step's table: T dependent
// steps, each a product wide enough to fill the GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "jitbmm/chain.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/chain_fused_steps.hpp"
#include "runtime/chain_strategy.hpp"
#include "runtime/device.hpp"
#include "runtime/hmm_sums.hpp"
#include "runtime/jit.hpp"
#include "runtime/side_streams.hpp"
#include "support/built_once.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

// How the stepped strategy runs a pass: a product of the bmm plans and a launch per position, or the fused form
// (templates/chain/fused_steps.cuh and fused_viterbi.cuh: one persistent launch a pass, the log or max_plus HMM
// with one shared table, f32 accumulators), or whichever default_fused_steps says. The fused form keeps each tile's
// table side in shared memory where every tile has a block to itself and it fits (its resident entries);
// fused_streamed asks for the entries that stage both sides of each chunk in turn everywhere.
enum class StepKernel : int { rule, products, fused, fused_streamed };

// The form a plan of `kernel` takes for a problem on `device`: fused or the products (StepKernel::rule: as
// default_fused_steps says); and the parts the products' log steps of a shared table sum their sources in
// (step_parts; 1 otherwise), whichever form runs. A
// forward that saves its messages for the backward runs the two passes' log steps of a shared table as one product
// a position, in `saving_parts` parts a pass, where both a pass's steps and the stacked product take parts (0: the
// passes run side by side, a product each).
struct SteppedForm {
  bool fused = false;
  int64_t parts = 1;
  int64_t saving_parts = 0;
};
SteppedForm stepped_form(const ChainProblem& problem, const DeviceInfo& device, StepKernel kernel = StepKernel::rule);

class SteppedChain final : public ChainStrategy {
public:
  // Compiles the step module (and the fused one where `kernel` takes it; asking for it where it does not apply is
  // std::invalid_argument naming "steps"). The products tune only with `tune_products` (what `jitbmm tune --chain`
  // asks for); otherwise they take stored decisions or the default, as every chain plan's. `build` quick: a
  // stand-in's (runtime/chain_stand_in.hpp; `kernel` must then be the products'): the products' default variants in
  // their smallest tile, whose kernels compile fastest, and every kernel a quick build (runtime/jit.hpp); sizes: none
  // built (runtime/chain_strategy.hpp).
  SteppedChain(const ChainProblem& problem, std::shared_ptr<const DeviceInfo> device, bool tune_products = false,
               StepKernel kernel = StepKernel::rule, StrategyBuild build = StrategyBuild::kernels);
  SteppedChain(const SteppedChain&) = delete;
  SteppedChain& operator=(const SteppedChain&) = delete;

  const char* name() const override { return "stepped"; }
  // The forward: `params` as the sequential kernels take them (inputs, lengths, saved's pieces, path, score,
  // alpha: runtime/chain_plan.cpp attaches them), the same outputs written. `saved` gets the same layout and
  // meaning as the sequential kernels' (the forward and the backward messages, relative, with their offsets).
  void forward(jb::ChainParams params, void* saved, Stream stream, const Workspace& workspace) const override;
  // The backward: the CRF form's grad (potentials), or the HMM form's grad_emissions, grad (transitions) and
  // grad_initial, each where not null, from the pieces of `saved` in params.
  void backward(jb::ChainParams params, const void* saved, Stream stream, const Workspace& workspace) const override;

  // The forward's scratch: with saved the backward messages' pass takes its own, as it runs beside the forward's or
  // with it in one product a position.
  std::size_t workspace_bytes(bool with_saved, bool with_path) const override;
  // The backward's scratch (the HMM form's transitions' gradient: its operand and products).
  std::size_t backward_workspace_bytes(bool transitions) const override;
  std::string kernel_name() const override;

private:
  // The product kinds a plan keeps (products_).
  enum ProductKind : int { kStep = 0, kEdges = 1, kStacked = 2 };
  static std::size_t bytes_of(std::initializer_list<int64_t> sizes); // checked, naming "chain: workspace"
  // One direction's pass over every position on `stream`: params' msg, prod, running and argmax its own scratch,
  // `products` its products'.
  void pass(jb::ChainParams params, bool beta, bool with_path, void* table_scratch, const Workspace& products,
            Stream stream) const;
  // Both directions' passes at once, each position's two steps one product (the stacked product): the forward's
  // messages at position i and the backward's at T − 1 − i, their msg rows side by side, their tables side by side in
  // `tables` (the forward's transposed first) and their parts' results one after the other in prod.
  void stacked_passes(jb::ChainParams forward, jb::ChainParams backward, void* tables, const Workspace& products,
                      Stream stream) const;
  // The same pass in the fused form: `scratch` holds the fused form's after the table; `beside` as FusedSteps::pass's.
  void fused_pass(jb::ChainParams params, bool beta, void* table_scratch, void* scratch, CUstream stream,
                  bool beside = false) const;
  // The forward's scratch pieces (the products planned on the way: before a call's first launch).
  struct ForwardPieces;
  ForwardPieces pieces(bool with_saved, bool with_path, Stream stream) const;
  // Direction: the forward's products (the table transposed: from p to c) or the backward messages' (from c to p).
  SemiringBMM product(bool beta, bool argmax, Stream stream) const;
  SemiringBMM stacked_product(Stream stream) const;
  SemiringBMM edge_product(Stream stream) const;
  // The plan of the product of kind `kind` (beta, argmax: product()'s), of `problem`, made on first use and kept: a
  // build holds up no call that wants another product, or a side stream. Tunes only where the plan tunes its products.
  SemiringBMM kept_product(ProductKind kind, bool beta, bool argmax, const Problem& problem, Stream stream) const;
  // The scratch of one of them, whose problem is `q`: its plan's, or made for the sizes alone the most its plan may
  // take without tuning (runtime/product_workspace_bound.hpp).
  std::size_t product_bytes(const Problem& q, const std::function<SemiringBMM()>& plan) const;
  // Their problems.
  Problem product_problem(bool beta, bool argmax) const;
  Problem stacked_problem() const;
  Problem edge_problem() const;
  // An entry of the step module's forward unit, or of its backward one (generator/chain_source.hpp).
  void launch(const char* suffix, int64_t items, bool block_per_item, jb::ChainParams& params, CUstream stream,
              bool backward_unit = false) const;
  // Whether the tables are copied into the accumulator type first (and the products read them from scratch).
  bool widened() const;
  std::size_t widened_bytes() const;
  // Step t's table for the products of a direction (copied into `scratch_table` first where widened()).
  const void* table(const jb::ChainParams& params, int64_t t, bool beta, void* scratch_table, CUstream stream) const;
  // The HMM log backward's ranges of sequences whose shares of the transitions' gradient are separate products
  // (summed by "_finish"): enough to fill the GPU where one shared table's product would not.
  int64_t edge_slices() const;

  ChainProblem problem_;
  bool tune_products_ = false;
  bool quick_ = false;
  bool sizes_only_ = false; // made for its sizes alone (StrategyBuild::sizes)
  bool fused_form_ = false; // the passes fused (fused_, unless made for its sizes alone)
  std::shared_ptr<const DeviceInfo> device_;
  std::shared_ptr<const LoadedKernel> kernel_, backward_kernel_; // the step module's units
  std::unique_ptr<const FusedSteps> fused_; // where the passes are fused
  std::unique_ptr<const HmmSums> sums_;     // the log HMM's backward where hmm_sums_apply (its kernel null: sizes)
  int64_t strides_[4] = {}; // the step table's (b, t, c, p): the potentials', or the transitions' with t 0
  int64_t parts_ = 1;       // the parts a log step product of a shared table sums the sources in (step_parts)
  int64_t stacked_parts_ = 0; // the stacked product's parts a pass (SteppedForm::saving_parts)
  mutable std::mutex products_mutex_; // guards products_' entries (each builds on its own)
  mutable std::map<std::tuple<int, bool, bool>, BuiltOnce<SemiringBMM>> products_; // by (kind, beta, argmax)
  SideStreams sides_; // where the backward messages' pass runs beside a caller's stream
};

} // namespace jitbmm
