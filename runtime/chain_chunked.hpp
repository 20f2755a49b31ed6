// The chunked strategy (docs/chains-design.md, "The chunked strategy"): the T − 1 steps cut into chunks of L, each
// chunk's product of its L step matrices formed by a tree of batched products (the bmm plans, level by level over
// every chunk at once; the HMM form's steps formed from its tables). A log chain then runs the chain of the chunks'
// products in the sequential kernel (a plan of B sequences of chunks + 1 positions); a max_plus chain runs it in a
// kernel of its own to every chunk's first messages, then every chunk's steps again from those, all chunks at once,
// for the back-pointers, and follows them from the end (templates/chain/chunk_viterbi.cuh). It does B·T·C³ work
// instead of B·T·C², in about T / L dependent steps instead of T − 1 (and L more for a best path): it pays where a
// few sequences along a long chain leave most of the GPU idle.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jitbmm/chain.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/chain_strategy.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "support/built_once.hpp"
#include "templates/chain/chunk_params.cuh"
#include "templates/chain/params.cuh"

namespace jitbmm {

// How the chunked strategy cuts a problem into chunks of `chunk` steps on `device`: L steps a chunk, a tree of
// `levels` levels (2^levels ≥ L), `chunks` chunks a sequence, `group` chunks a pass of the tree.
struct ChunkLayout {
  int64_t L = 2, levels = 0, chunks = 1, group = 1;
  ChunkLayout(const ChainProblem& problem, int64_t chunk, const DeviceInfo& device);
  // The batches of the levels' products over the passes of the tree, for B sequences.
  std::vector<int64_t> level_batches(int64_t B) const;
};

class ChunkedChain final : public ChainStrategy {
public:
  // Compiles the chunk module. A log chain takes `chain_of_chunks_plan`, the caller's plan of chain_of_chunks(problem,
  // chunk) in the sequential kernels (chain_plan_for makes it: this strategy is one of a chain plan's, and plans no
  // chain of its own); a max_plus chain takes none. Throws std::invalid_argument naming "chunk" where chunk_unfit
  // says why the problem cannot take such chunks, and naming "chain of chunks" when the plan is of another chain or
  // is missing or given where none is taken. The products tune only with `tune_products` (chain_plan_for).
  // `sequential`: the problem's sequential kernels, which write alpha beside the chunks (they have no messages of
  // their own positions) and run max_plus's backward (it reads the path); a call that needs them without them is
  // std::logic_error. `build` sizes: nothing compiled and no chain of chunks taken (runtime/chain_strategy.hpp), its
  // `sequential` made so too.
  ChunkedChain(const ChainProblem& problem, int64_t chunk, std::optional<ChainPlan> chain_of_chunks_plan,
               std::shared_ptr<const DeviceInfo> device, bool tune_products = false,
               std::shared_ptr<const ChainStrategy> sequential = nullptr,
               StrategyBuild build = StrategyBuild::kernels);

  // Each call reads the inputs the plan put in `call` (either form: its pointers, strides and lengths) and writes the
  // outputs named there, as ChainPlan's calls. log: the forward call.score (and `saved`, of chain_saved_bytes(problem)
  // bytes, which it writes whole), the backward from call.grad_score the gradients (call.grad: the potentials' or the
  // HMM form's transitions'; call.grad_emissions and call.grad_initial; each null where not asked for). max_plus: the
  // forward call.score and, where call.path is set, the best path.
  const char* name() const override { return "chunked"; }
  void forward(jb::ChainParams call, void* saved, Stream stream, const Workspace& workspace) const override;
  void backward(jb::ChainParams call, const void* saved, Stream stream, const Workspace& workspace) const override;
  // The scratch each takes, its products' own included: the forward's (log: less with saved; max_plus: more with the
  // path's back-pointers), the backward's (log: the tree's; max_plus: the sequential kernels').
  std::size_t workspace_bytes(bool with_saved, bool with_path = false) const override;
  std::size_t backward_workspace_bytes(bool transitions) const override;

  int64_t chunk() const override { return L_; }
  // The sequential module's, which the plan's other calls name.
  std::string kernel_name() const override { return sequential_ ? sequential_->kernel_name() : ""; }

private:
  void log_forward(const jb::ChainParams& call, void* saved, Stream stream, const Workspace& workspace) const;
  void log_backward(const jb::ChainParams& call, const void* saved, Stream stream, const Workspace& workspace) const;
  void best_path(const jb::ChainParams& call, Stream stream, const Workspace& workspace) const;
  std::size_t matrix_bytes(int64_t matrices) const;
  std::size_t top_saved_offset() const;
  void launch(const char* suffix, int64_t items, bool block_per_item, void* params, CUstream stream) const;
  // The argument block with the problem's sizes and the call's inputs and strides.
  jb::ChunkParams params_for(const jb::ChainParams& call) const;
  // The HMM form's log backward after the tree's, a pass of `params.count` chunks whose steps' gradients are in
  // params.matrices: the emissions' gradient, and the transitions' and the initial table's sums so far.
  void hmm_gradients(const jb::ChunkParams& params, CUstream stream) const;
  // The steps of params' chunks copied into level[0], then each level's products into the next, every matrix made
  // relative to its largest entry, the shifts level after level from `shifts` on.
  void form_tree(jb::ChunkParams params, const std::vector<char*>& level, char* shifts, const Workspace& products,
                 Stream stream) const;
  // Every chunk's relative product into `products` ([B·chunks][C][C]) and its offset into params.offsets, a pass of
  // group_ chunks at a time through the levels `even` and `odd` and the shifts.
  void form_products(jb::ChunkParams params, char* products, char* even, char* odd, char* shifts,
                     const Workspace& scratch, Stream stream) const;
  // The plan of a level's `batch` products, made on its first use (for calls on `stream`; a call on a stream being
  // captured holds tuning and launches from its start, ChainPlan's CallHold) and kept: a plan's get() chooses its
  // variant anew each time.
  SemiringBMM product(int64_t batch, Stream stream) const;
  // The most scratch a level's product takes, forward or backward, its plans made for calls on `stream` where this
  // is their first use (made for the sizes alone: the most a plan of it may take, runtime/product_workspace_bound.hpp).
  std::size_t product_scratch_bytes(bool backward, Stream stream = nullptr) const;

  ChainProblem problem_;
  int64_t L_ = 2, levels_ = 1, chunks_ = 1, group_ = 1; // chunks_ per sequence; group_ chunks per pass of the tree
  // A chain plan tunes nothing on its own (a first call would otherwise time every product's candidates): the
  // forward and the backward hold tuning (TuningHold) unless `tune --chain` asked for it.
  bool tune_products_ = false;
  bool sizes_only_ = false; // made for its sizes alone (StrategyBuild::sizes)
  std::shared_ptr<const DeviceInfo> device_;
  std::shared_ptr<const LoadedKernel> kernel_;
  std::optional<ChainPlan> top_; // log: the chain of chunks
  std::shared_ptr<const ChainStrategy> sequential_;
  mutable std::mutex mutex_; // guards products_' entries (each builds on its own: a level's holds up no other's)
  mutable std::map<int64_t, BuiltOnce<SemiringBMM>> products_; // by batch
  static constexpr std::size_t kUnknownBytes = ~std::size_t(0);
  mutable std::atomic<std::size_t> product_scratch_[2] = {kUnknownBytes, kUnknownBytes}; // forward, backward
};

// Adds to `units` and `specs` the kernels a chunked plan of `problem` in chunks of `chunk` builds at once when it is
// made (its module, first in `units`, and its trees' products, a log chain's with their backward passes, chosen as
// its calls choose them): a caller may build them with others (the sequential kernels beside the chunks), all at once.
void chunked_kernels_ahead(const ChainProblem& problem, int64_t chunk, const DeviceInfo& device, bool tune_products,
                           std::vector<GeneratedKernel>& units, std::vector<KernelSpec>& specs);

// The problem of the products at a level of the chunked strategy's trees over `problem`'s chunks, `batch` of them:
// each the later of two adjacent matrices times the earlier, read where they lie side by side.
Problem chunk_level_problem(const ChainProblem& problem, int64_t batch);

// The chain the chunked strategy runs over its chunks' products: B sequences of ceil((T − 1) / chunk) + 1
// positions whose steps are those products, in the accumulator type, contiguous. Throws std::invalid_argument
// where chunk_unfit says why the problem cannot take such chunks.
ChainProblem chain_of_chunks(const ChainProblem& problem, int64_t chunk);

// Whether the chunked strategy can compute `problem` in chunks of `chunk` steps: T ≥ 2 and at most
// kMaxSequentialChainStates states; a log chain whose chunks' products (B·ceil((T − 1) / chunk)·C² values) fit in
// `saved` beside the chain of chunks' own saved messages, or a max_plus chain; otherwise the reason, naming "chunk".
std::string chunk_unfit(const ChainProblem& problem, int64_t chunk);

} // namespace jitbmm
