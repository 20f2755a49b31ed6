// The stepped strategy's kernels (runtime/chain_stepped.hpp): its per-position modules and its fused forms → CUDA
// source from templates/chain/steps.cuh and the fused passes' templates.
#pragma once

#include <string>
#include <string_view>

#include "generator/emit_source.hpp"
#include "jitbmm/chain_problem.hpp"

namespace jitbmm {

// The stepped strategy's modules (templates/chain/steps.cuh) for chains of a semiring, inputs' dtype and form, one
// for every C, in two units compiled apart (at once, where a plan builds them ahead). The forward's: the main entry
// finishes a position of every sequence (a block each); "_widen" copies a table into the accumulator type; max_plus
// "_path" (a thread per sequence). With `backward` ("<name>_backward"): the CRF form's "_marginals"; the HMM form's
// "_nodes" and "_reduce" (the emissions' and the initial table's gradients), and for the transitions' "_signs",
// "_operand" (or "_nodes_operand", with the emissions' gradient) and "_finish" (log) or "_path_edges" and "_cast"
// (max_plus). Blocks of kStepThreads, "_reduce"'s of jb::kHmmReduceThreads (step_entry_threads).
constexpr int kStepThreads = 256;
int step_entry_threads(std::string_view suffix);
GeneratedKernel emit_step_kernel(Semiring semiring, DType dtype, ChainForm form, bool backward = false);

// The stepped strategy's fused forms for an HMM with one shared table, one persistent launch a pass, a unit a pass:
// the main entry a cooperative launch after "_factors" (256 threads, a block per 32 columns) has made the pass's
// table's column maxima. log (templates/chain/fused_steps.cuh): the forward, or with `beta` the backward messages,
// "_factors" the table's factors too; max_plus (templates/chain/fused_viterbi.cuh, no `beta`): the forward with its
// best path. The streaming entries run blocks of jb::kFusedBlock threads; `resident` ones a block of
// jb::fused_resident_threads threads per tile that keeps its tile's table side in jb::fused_resident_floats of
// dynamic shared memory; with `paired` (log's resident entries alone, "_paired") for at most
// jb::kFusedPairedSources sources, compiled for two blocks an SM. A unit a pass, so that a plan compiles only the
// passes it takes, all at once (runtime/tuner/build_ahead.hpp). Inputs of f32, f16 or bf16 (f32 accumulators).
GeneratedKernel emit_fused_step_kernel(Semiring semiring, DType dtype, bool beta, bool resident, bool paired = false);
// Whether chains of `states` states have paired entries (jb::fused_paired, log alone), which a plan that takes the
// resident ones may take for a saving forward's passes side by side (runtime/chain_fused_steps.hpp).
bool fused_step_paired(Semiring semiring, int64_t states);

} // namespace jitbmm
