// The CLI's usage text: each command's part, printed by `jitbmm <command> --help` and, all together, by
// `jitbmm --help`. What the tables already say — which strategies read each variant flag (the strategy table's
// fields), the --math values — is written from them, so the help says what the flags do.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "cli/spec_args.hpp"
#include "jitbmm/kernel_spec.hpp"

namespace jitbmm::cli {

// `text` in lines of at most `width` columns (a longer word gets a line of its own), each indented by `indent`
// spaces and ended by a newline.
inline std::string wrap(const std::string& text, std::size_t indent, std::size_t width) {
  std::string out, line;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find(' ', pos), text.size());
    const std::string word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += std::string(indent, ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += std::string(indent, ' ') + line + "\n";
  return out;
}

// "Variant flags apply to the strategies that read them (--block: linear, ...; --k-chunk: split_k; ...).": the
// strategies of each flag as variant_flags() reads them from the strategy table; flags read by the same strategies
// share one list.
inline std::string variant_flags_sentence() {
  const std::vector<VariantFlag>& flags = variant_flags();
  std::string groups;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    groups += flags[i].flag;
    if (i + 1 < flags.size() && flags[i + 1].used_by == flags[i].used_by) {
      groups += ", ";
      continue;
    }
    groups += ":";
    for (std::size_t j = 0; j < flags[i].used_by.size(); ++j)
      groups += std::string(j == 0 ? " " : ", ") + strategy_name(flags[i].used_by[j]);
    if (i + 1 < flags.size()) groups += "; ";
  }
  return "Variant flags apply to the strategies that read them (" + groups + ").";
}

// "fma|tf32x3|...": every Math value, in the enum's order.
inline std::string math_values() {
  std::string out;
  for (int i = 0; i < math_count(); ++i) out += std::string(i == 0 ? "" : "|") + math_name(static_cast<Math>(i));
  return out;
}

// inspect's usage. Its description is wrapped at the width of the other commands' hand-wrapped lines.
inline std::string inspect_help() {
  const std::string description =
      "Print the generated source, NVRTC's PTX, SASS (via nvdisasm), or ptxas's resource report (no GPU needed). "
      "--semiring, --dtype, --shape and --emit default to log, f32, 64x512x512x512 and cuda; a command that relies on "
      "a default says which on stderr (so do tune and bench). --a-layout / --b-layout: an operand row-major "
      "(default), column-major (transposed in memory) or one matrix for every batch (broadcast). " +
      variant_flags_sentence();
  const std::string math = "                 [--math " + math_values() + "]\n";
  return "  jitbmm inspect --semiring S --dtype D --shape BxMxKxN [--out-dtype D] [--argmax]\n"
         "                 [--strategy S] [--pass forward|grad_a|grad_b] [--block XxY] [--tile MxNxK] [--thread MxN]\n"
         "                 [--min-blocks N] [--k-chunk N] [--precision exact|fast]\n" +
         math +
         "                 [--a-layout row|col|broadcast] [--b-layout row|col|broadcast]\n"
         "                 [--index64] [--arch sm_90]\n"
         "                 --emit cuda|ptx|sass|resources|all\n" +
         wrap(description, 6, 108) +
         "  jitbmm inspect --chain C [--hmm] [--semiring log|max_plus] [--dtype f32|f64|f16|bf16] [--cluster K]\n"
         "                 [--threads N] [--lanes G] [--beta-lanes G] [--saving-blocks N] [--saving | --backward]\n"
         "                 [--arch sm_90] --emit cuda|ptx|sass|resources|all\n"
         "      The same for the linear-chain kernels of C states (docs/chains.md): the forward's unit, --saving\n"
         "      log's saving forward's, --backward the backward's (each compiled apart);\n"
         "      --hmm: the HMM form's (transitions and emissions instead of potentials); --cluster K: each\n"
         "      sequence's recursion split over a cluster of K blocks (sm_90 on; a plan picks K by batch and GPU,\n"
         "      or takes a stored decision's); --saving-blocks N: the saving forward compiled for N blocks an SM\n"
         "      (a plan takes 2 where the rule says, by batch and GPU).\n"
         "  jitbmm inspect --chain C --chunks [--semiring log|max_plus] [--dtype f32|f64|f16|bf16] [--arch sm_90]\n"
         "                 --emit ...\n"
         "      The chunked strategy's own module for chains of C states (the products are bmm kernels).\n"
         "  jitbmm inspect --chain C [--hmm] --stepped [--backward | --fused [--streamed | --paired] [--beta]]\n"
         "                 [--semiring log|max_plus] [--dtype D] [--arch sm_90] --emit ...\n"
         "      The stepped strategy's own module's forward unit (its products are bmm kernels), --backward its\n"
         "      backward's; --fused: its fused form's unit of one pass (one persistent kernel, for the HMM form with\n"
         "      one shared table; f32, f16, bf16): the forward's resident entries, --streamed the streaming ones,\n"
         "      --paired log's resident ones compiled for two blocks an SM (up to 128 states: a saving forward's\n"
         "      passes side by side where one pass takes more than half the SMs), --beta log's backward messages.\n"
         "  jitbmm inspect --chain C --expectation [--hmm] [--field given|chain|difference]\n"
         "                 [--dtype f32|f64|f16|bf16] [--cluster N] [--arch sm_90] --emit ...\n"
         "      The chain expectation module of C states (at most 1024): entropy, cross-entropy and KL\n"
         "      (docs/distributions.md), its forward, the forward that saves both sweeps' messages (_saving) and\n"
         "      the gradients (_edges; --hmm: the HMM form's, from its tables: _transpose, _nodes, _transitions\n"
         "      and _reduce); --field: a field of its own (given, the entropy's; the default), a second chain q\n"
         "      (chain, the cross-entropy's) or p - q (difference, KL's); --cluster: a cluster of N blocks a\n"
         "      sequence (sm_90; a plan takes clusters from 128 states).\n"
         "  jitbmm inspect --chain C --kbest K [--hmm] [--dtype f32|f64|f16|bf16] [--cluster N] [--arch sm_90]\n"
         "                 --emit ...\n"
         "      The module of the K best paths (K at most 16) of chains of C states (at most 1024); --hmm: the\n"
         "      HMM form's, from its tables; --cluster as for --expectation.\n"
         "  jitbmm inspect --chain C --samples [--dtype f32|f64|f16|bf16] [--arch sm_90] --emit ...\n"
         "      The module that draws exact samples of chains of C states, of either form, from their forward\n"
         "      messages.\n"
         "  jitbmm inspect --tuned [problem flags]\n"
         "      Which variant this GPU runs for the problem, where the choice came from (exact, bucket or nearest\n"
         "      bucket decision, or the default) and the timings of the best candidates the autotuner compared.\n"
         "  jitbmm inspect --tuned --chain C [--hmm] [--batch B] [--length T] [--semiring S] [--dtype D]\n"
         "      The chain variant a plan takes on this GPU: a stored decision's clusters and lanes (tune --chain)\n"
         "      or the rule's, its strategy (sequential; chunked for a few sequences of a long chain; stepped for an\n"
         "      HMM's table shared by many sequences of many states, and always beyond 1024 states) and why: the\n"
         "      rule's condition, or the stored decision with its timings.\n";
}

struct CommandHelp {
  std::string command;
  std::string text;
};

// Each command's usage, in the order `jitbmm --help` prints them.
inline const std::vector<CommandHelp>& command_help() {
  static const std::vector<CommandHelp> help = {
      {"demo", "  jitbmm demo [--shape BxMxKxN]\n"
               "      On a GPU: run the log semiring (default 64x512x512x512, f32), verify a sample against the CPU\n"
               "      reference, print time, terms/s and the share of the measured exp throughput.\n"
               "      Without a GPU: say so, NVRTC-compile the same kernel for sm_90, run the CPU reference.\n"},
      {"inspect", inspect_help()},
      {"tune",
       "  jitbmm tune [problem flags] [--pass forward|grad_a|grad_b] [--data normal|wide]\n"
       "      Autotune one problem on this GPU; store the decision for its exact shape and its bucket. --data wide\n"
       "      times on randn*50 inputs: the variant a plan moves to when its repairs show wide-range data.\n"
       "  jitbmm tune --chain C [--hmm] [--batch B] [--length T] [--semiring log|max_plus] [--dtype D] [--reps N]\n"
       "      Time a chain's cluster sizes on this GPU (sm_90 on) and its forward's lanes in the fastest, the\n"
       "      chunked strategy in chunks of 32 to 256 steps and of the whole chain (up to 1024 states), and\n"
       "      the stepped strategy (a product of every sequence's messages a step; beyond 1024 states the only one)\n"
       "      in its products and, for a log or max_plus HMM of one shared table (not f64), its fused form, each\n"
       "      checked against the CPU reference; store the fastest for every chain plan of its bucket (B and T\n"
       "      rounded up to powers of two).\n"
       "  jitbmm tune --export FILE | --import FILE\n"
       "      Write every decision of the cache to a decisions file, or store a file's decisions where the cache has\n"
       "      none under their keys (marked imported, checked against the CPU reference on first use): a site tunes\n"
       "      once and shares the file.\n"},
      {"bench",
       "  jitbmm bench [--json] [--reps N] [problem and variant flags as for inspect]\n"
       "      Benchmark (GPU): with no problem flags, the standard table of shapes and strategies.\n"
       "  jitbmm bench --first-call [--step] [problem flags]    time from start to the first result (--step:\n"
       "      to a first training step's gradients), what ran it (a stand-in?) and when the plan settled, NVRTC calls\n"
       "  jitbmm bench --first-call --chain C [--hmm] [--batch B] [--length T] [--semiring S] [--dtype D]\n"
       "      a chain's first forward (+ backward for log) from start, by a stand-in or not, and when its plan\n"
       "      settled on its chosen strategy\n"
       "  jitbmm bench --backward [problem flags]      forward and backward times, memory, sampled check\n"
       "      (row-major operands: --a-layout and --b-layout are not taken)\n"
       "  jitbmm bench --exp-matmul [--shape S] [--dtype D]  exp_matmul vs the direct kernels on randn, randn*50,\n"
       "      randn*500 and banded -inf inputs: time, terms/s, relative error of a sample, share repaired\n"
       "  jitbmm bench --chain C [--hmm] [--batch B] [--length T] [--semiring log|max_plus]\n"
       "               [--dtype f32|f64|f16|bf16] [--cluster K] [--threads N] [--lanes G] [--beta-lanes G] [--sweep]\n"
       "               [--saving-blocks N] [--chunk L[,L...]] [--stepped] [--reps N]\n"
       "      The linear-chain kernels (docs/chains.md), default B = 32, T = 512: forward, forward saving its\n"
       "      messages (log) or with the best path (max_plus), backward; terms/s; a score checked on the CPU.\n"
       "      --hmm: the HMM form's kernels, from emissions, one transition table and one initial table.\n"
       "      --cluster/--threads/--lanes/--beta-lanes/--saving-blocks: that variant; --sweep: the default,\n"
       "      every cluster size, and every block and lane count; --chunk: also the chunked strategy in chunks\n"
       "      of L steps;\n"
       "      --stepped: also the stepped strategy (each step a product of every sequence's\n"
       "      messages). The plan's own strategy comes first.\n"
       "  jitbmm bench --compile-times [problem flags] [--arch sm_XY] [--verbose]\n"
       "      NVRTC compile time of each tuning candidate (no GPU needed).\n"},
      {"cache",
       "  jitbmm cache path|list|verify|clear\n"
       "      The disk cache of compiled kernels ($JITBMM_CACHE_DIR, $XDG_CACHE_HOME/jitbmm or ~/.cache/jitbmm).\n"},
      {"info", "  jitbmm info\n"
               "      Driver, NVRTC, the device, its architecture's features (or JITBMM_FEATURES's level) and what they\n"
               "      allow, the architectures supported, the disk cache's directory, the shipped decisions.\n"},
      {"version", "  jitbmm version | --version\n"
                  "      Print the version.\n"},
      {"help", "  jitbmm help [command] | --help | <command> --help\n"
               "      This text, or one command's part of it.\n"},
  };
  return help;
}

constexpr const char* kStrictness =
    "\nArguments are strict: an unknown flag, a flag given twice, a flag without its value, a number that is not\n"
    "a whole integer in range, or a flag the chosen command, mode or strategy does not use is an error (exit\n"
    "status 2) naming the flag; nothing is silently ignored. A flag's value follows it (--shape 2x3x4x5) or an\n"
    "'=' (--shape=2x3x4x5).\n";

inline const CommandHelp* help_of(const std::string& command) {
  for (const CommandHelp& h : command_help())
    if (command == h.command) return &h;
  return nullptr;
}

} // namespace jitbmm::cli
