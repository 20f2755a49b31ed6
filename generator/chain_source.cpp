#include "generator/chain_source.hpp"

#include <algorithm>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "jitbmm/version.hpp"
#include "templates/chain/chunk_params.cuh"
#include "templates/chain/edge_params.cuh"
#include "templates/chain/params.cuh"

namespace jitbmm {

namespace {

// Half the threads an SM holds from sm_80 on (all of them on sm_75): a unit compiled for that many threads an SM
// leaves each of them 64 registers.
constexpr int kHalfSmThreads = 1024;

// "512x8", or split over a cluster "512x8x4"; compiled for two blocks an SM "512x8m2".
std::string loop_text(const ChainLoop& l) {
  return std::to_string(l.threads) + 'x' + std::to_string(l.lanes) +
         (l.cluster > 1 ? 'x' + std::to_string(l.cluster) : std::string()) +
         (l.blocks > 1 ? 'm' + std::to_string(l.blocks) : std::string());
}

// The fields every unit's text depends on.
std::string common_text(const ChainSpec& s) {
  return "semiring=" + std::string(semiring_info(s.semiring).name) + " dtype=" + dtype_info(s.dtype).name +
         (s.form == ChainForm::hmm ? " form=hmm" : "") + " C=" + std::to_string(s.C);
}

} // namespace

std::string to_string(const ChainSpec& s) {
  return common_text(s) + " forward=" + loop_text(s.forward) + " saving=" + loop_text(s.saving) +
         " beta_lanes=" + std::to_string(s.beta_lanes) + " backward_threads=" + std::to_string(s.backward_threads);
}

GeneratedKernel emit_chain_kernel(const ChainSpec& s, ChainUnit unit) {
  const bool log = s.semiring == Semiring::log, hmm = s.form == ChainForm::hmm;
  if (unit == ChainUnit::saving && !log)
    throw std::invalid_argument(
        "chain unit: max_plus has no saving forward (its forward with the path is the forward)");
  // The kernels take the inputs' storage type; the reductions work in its accumulator type.
  const std::string type = dtype_info(s.dtype).device_type;
  const std::string op = std::string("jb::") + (log ? "ChainLog<" : "ChainMax<") + dtype_info(s.dtype).acc_type + ">";
  // A loop's template arguments after its block size: lanes, prefetch, stages, staged (the saving forward's backward
  // messages alone).
  auto loop = [&](const ChainLoop& l, bool staged = false) {
    return std::to_string(l.lanes) + ", " + (!staged && s.prefetch(l) ? "true" : "false") + ", " +
           std::to_string(staged ? 0 : s.stages(l)) + ", " + (staged ? "true" : "false");
  };
  // A device function's call with its template arguments.
  auto call = [](const char* function, std::initializer_list<std::string> args) {
    std::string text = std::string("jb::") + function + "<";
    for (const std::string& a : args) text += (text.back() == '<' ? "" : ", ") + a;
    return text + ">";
  };
  const std::string C = std::to_string(s.C), hmm_flag = hmm ? "true" : "false", log_flag = log ? "true" : "false";
  auto n = [](int v) { return std::to_string(v); };
  // Each unit's name says what its text depends on beside the semiring, the dtype and C: the forward's loop, the
  // saving forward's two loops, the backward's block.
  std::ostringstream name;
  name << (hmm ? "hmm_" : "chain_") << semiring_info(s.semiring).name << '_' << dtype_info(s.dtype).name << "_c" << s.C;
  std::vector<EntryPoint> entries;
  const char* header = "chain/sequential.cuh";
  std::string fields; // the spec's fields the unit reads, for its header line
  if (unit == ChainUnit::forward) {
    const ChainLoop& f = s.forward;
    entries.push_back({"", f.threads, f.blocks,
                       call("chain_forward", {type, op, C, n(f.threads), loop(f), "false", hmm_flag, n(f.cluster)}),
                       f.cluster});
    name << "_b" << f.threads << "_l" << f.lanes;
    fields = " forward=" + loop_text(f);
    if (f.cluster > 1) name << "_k" << f.cluster;
    if (f.blocks > 1) name << "_m" << f.blocks;
  } else if (unit == ChainUnit::saving) {
    entries.push_back({"", s.saving.threads, s.saving.blocks,
                       call("chain_saving", {type, op, C, n(s.saving.threads), loop(s.saving),
                                             loop(s.beta(), s.beta_staged()), hmm_flag, n(s.saving.cluster)}),
                       s.saving.cluster});
    name << "_saving_s" << s.saving.threads << 'x' << s.saving.lanes << 'x' << s.beta_lanes;
    fields = " saving=" + loop_text(s.saving) + " beta_lanes=" + std::to_string(s.beta_lanes);
    if (s.saving.cluster > 1) name << 'x' << s.saving.cluster;
    if (s.saving.blocks > 1) name << "_m" << s.saving.blocks;
  } else if (hmm) { // the HMM backward's template arguments: the type, the semiring, C
    header = "chain/hmm_edges.cuh";
    // The nodes, mostly a wait on memory, compiled for half an SM's threads (three blocks in f64, whose values take
    // two registers each): left free, ptxas took 70 to 90 registers, two blocks an SM.
    const int node_blocks = dtype_info(s.dtype).acc_bytes == 8 ? 3 : kHalfSmThreads / kHmmNodeThreads;
    entries.push_back({"", kHmmNodeThreads, node_blocks, call("hmm_nodes", {type, log_flag, C})});
    // The edges' blocks hold their entries' sums and transitions in registers, compiled for edge_blocks_per_sm an
    // SM: HmmSums::split (runtime/hmm_sums.cpp) sizes their grid for that many, or fewer where the SM's shared memory
    // holds fewer.
    for (const int kind : {jb::kEdgeNarrow, jb::kEdgeWide, jb::kEdgeMma}) {
      if ((kind == jb::kEdgeWide && !s.wide_edges()) || (kind == jb::kEdgeMma && !s.mma_edges())) continue;
      const int threads = s.edge_threads(kind);
      entries.push_back({ChainSpec::edge_entry(kind), threads,
                         jb::edge_blocks_per_sm(threads, dtype_info(s.dtype).acc_bytes, kind),
                         call("hmm_edges", {type, log_flag, C, n(threads), n(s.edge_rows(kind)), n(kind)})});
    }
    entries.push_back({"_reduce", jb::kHmmReduceThreads, 1, call("hmm_reduce", {type, log_flag, C})});
    name << "_backward"; // its blocks follow from C
  } else {
    header = "chain/marginals.cuh";
    // A block a step, whose time is mostly its wait on memory: compiled for half an SM's threads (64 registers a
    // thread), so that an SM holds several steps' waits at once. Left free, ptxas took 70 to 114 registers, two or
    // three blocks of 256 threads an SM.
    entries.push_back({"", s.backward_threads, std::max(1, kHalfSmThreads / s.backward_threads),
                       call(log ? "chain_marginals" : "chain_path_backward", {type, C, n(s.backward_threads)})});
    name << "_backward_g" << s.backward_threads;
    fields = " backward_threads=" + std::to_string(s.backward_threads);
  }
  std::ostringstream os;
  os << "// Generated by jitbmm " << kVersion << ". Kernel " << kNameSlot << "\n"
     << "// chain spec: " << common_text(s) << fields << "\n\n";
  os << inline_templates({header});
  return finish_unit(name.str(), os.str(), "ChainParams", sizeof(jb::ChainParams), entries);
}

std::vector<GeneratedKernel> emit_chain_units(const ChainSpec& spec) {
  std::vector<GeneratedKernel> units = {emit_chain_kernel(spec, ChainUnit::forward)};
  if (spec.semiring == Semiring::log) units.push_back(emit_chain_kernel(spec, ChainUnit::saving));
  units.push_back(emit_chain_kernel(spec, ChainUnit::backward));
  return units;
}

GeneratedKernel emit_chunk_kernel(Semiring semiring, DType dtype, int C) {
  const DTypeInfo& d = dtype_info(dtype);
  const bool log = semiring == Semiring::log;
  const std::string storage = d.device_type, acc = d.acc_type, c = std::to_string(C),
                    nt = std::to_string(kChunkThreads);
  std::ostringstream os;
  os << "// Generated by jitbmm " << kVersion << ". Kernel " << kNameSlot << "\n\n";
  os << inline_templates({log ? "chain/chunk_hmm.cuh" : "chain/chunk_viterbi.cuh", "chain/chunks.cuh"});
  std::vector<std::pair<const char*, std::string>> calls = {
      {"", "chunk_pad<" + storage + ", " + c + ", " + nt + ">"},
      {"_normalize", "chunk_normalize<" + acc + ", " + c + ", " + nt + ">"},
      {"_offsets", "chunk_offsets<" + acc + ">"},
  };
  if (log) {
    calls.push_back({"_restore", "chunk_restore<" + acc + ", " + c + ">"});
    calls.push_back({"_score", "chunk_score<" + acc + ">"});
    calls.push_back({"_unpad", "chunk_unpad<" + storage + ", " + c + ">"});
    const std::string args = "<" + storage + ", " + c + ">"; // the HMM form's gradients of its tables
    calls.push_back({"_hmm_nodes", "chunk_hmm_nodes" + args});
    calls.push_back({"_hmm_edges", "chunk_hmm_edges" + args});
    calls.push_back({"_hmm_sums", "chunk_hmm_sums" + args});
    calls.push_back({"_hmm_cast", "chunk_hmm_cast" + args});
  } else {
    calls.push_back({"_chain", "chunk_chain<" + storage + ", " + c + ", " + nt + ">"});
    calls.push_back({"_rerun", "chunk_rerun<" + storage + ", " + c + ", " + nt + ">"});
    calls.push_back({"_compose", "chunk_compose<" + c + ">"});
    calls.push_back({"_expand", "chunk_expand<" + c + ">"});
  }
  std::vector<EntryPoint> entries;
  for (const auto& [suffix, call] : calls) entries.push_back({suffix, kChunkThreads, 1, "jb::" + call});
  return finish_unit(std::string("chain_chunks_") + semiring_info(semiring).name + "_" + d.name + "_c" + c, os.str(),
                     "ChunkParams", sizeof(jb::ChunkParams), entries);
}

} // namespace jitbmm
