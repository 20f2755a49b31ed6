// jitbmm: the command-line tool. Subcommands live in their own files; this one only dispatches and reports errors.
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/version.hpp"

namespace {

// Each command's usage, printed by `jitbmm <command> --help` and, all together, by `jitbmm --help`.
struct CommandHelp {
  const char* command;
  const char* text;
};
constexpr CommandHelp kHelp[] = {
    {"demo", "  jitbmm demo [--shape BxMxKxN]\n"
             "      On a GPU: run the log semiring (default 64x512x512x512, f32), verify a sample against the CPU\n"
             "      reference, print time, terms/s and the share of the measured exp throughput.\n"
             "      Without a GPU: say so, NVRTC-compile the same kernel for sm_90, run the CPU reference.\n"},
    {"inspect",
     "  jitbmm inspect --semiring S --dtype D --shape BxMxKxN [--out-dtype D] [--argmax]\n"
     "                 [--strategy S] [--pass grad_a|grad_b] [--block XxY] [--tile MxNxK] [--thread MxN]\n"
     "                 [--min-blocks N] [--k-chunk N] [--precision exact|fast]\n"
     "                 [--math fma|tf32x3|tf32|wgmma_tf32x3|wgmma_tf32|bf16|wgmma_bf16|wgmma_bf16_fused]\n"
     "                 [--a-layout row|col|broadcast] [--b-layout row|col|broadcast]\n"
     "                 [--index64] [--arch sm_90]\n"
     "                 --emit cuda|ptx|sass|resources|all\n"
     "      Print the generated source, NVRTC's PTX, SASS (via nvdisasm), or ptxas's resource report (no GPU\n"
     "      needed). --semiring, --dtype, --shape and --emit default to log, f32, 64x512x512x512 and cuda; a\n"
     "      command that relies on a default says which on stderr (so do tune and bench). --a-layout / --b-layout:\n"
     "      an operand row-major (default), column-major (transposed in memory) or one matrix for every batch\n"
     "      (broadcast). Variant flags apply to the strategies that read them (--block: linear, linear_two_pass,\n"
     "      warp, block_tree, scatter, histogram; --tile, --thread, --min-blocks: tiled, split_k, exp_matmul,\n"
     "      tiled_online, tiled_refine; --k-chunk: split_k; --math: exp_matmul).\n"
     "  jitbmm inspect --tuned [problem flags]\n"
     "      Which variant this GPU runs for the problem, where the choice came from (exact, bucket or nearest\n"
     "      bucket decision, or the default) and the timings of the best candidates the autotuner compared.\n"},
    {"tune", "  jitbmm tune [problem flags] [--pass forward|grad_a|grad_b] [--data normal|wide]\n"
             "      Autotune one problem on this GPU; store the decision for its exact shape and its bucket. --data wide\n"
             "      times on randn*50 inputs: the variant a plan moves to when its repairs show wide-range data.\n"},
    {"bench", "  jitbmm bench [--json] [--reps N] [problem and variant flags as for inspect]\n"
              "      Benchmark (GPU): with no problem flags, the standard table of shapes and strategies.\n"
              "  jitbmm bench --first-call [problem flags]    time from start to the first result, NVRTC calls\n"
              "  jitbmm bench --backward [problem flags]      forward and backward times, memory, sampled check\n"
              "  jitbmm bench --exp-matmul [--shape S] [--dtype D]  exp_matmul vs the direct kernels on randn, randn*50,\n"
              "      randn*500 and banded -inf inputs: time, terms/s, relative error of a sample, share repaired\n"
              "  jitbmm bench --compile-times [problem flags] [--arch sm_XY] [--verbose]\n"
              "      NVRTC compile time of each tuning candidate (no GPU needed).\n"},
    {"cache", "  jitbmm cache path|list|verify|clear\n"
              "      The disk cache of compiled kernels ($JITBMM_CACHE_DIR, $XDG_CACHE_HOME/jitbmm or ~/.cache/jitbmm).\n"},
    {"info", "  jitbmm info\n"
             "      Driver, NVRTC and devices.\n"},
    {"version", "  jitbmm version | --version\n"
                "      Print the version.\n"},
    {"help", "  jitbmm help [command] | --help | <command> --help\n"
             "      This text, or one command's part of it.\n"},
};

constexpr const char* kStrictness =
    "\nArguments are strict: an unknown flag, a flag given twice, a flag without its value, a number that is not\n"
    "a whole integer in range, or a flag the chosen command, mode or strategy does not use is an error (exit\n"
    "status 2) naming the flag; nothing is silently ignored. A flag's value follows it (--shape 2x3x4x5) or an\n"
    "'=' (--shape=2x3x4x5).\n";

const CommandHelp* help_of(const std::string& command) {
  for (const CommandHelp& h : kHelp)
    if (command == h.command) return &h;
  return nullptr;
}

void usage(std::FILE* to) {
  std::fprintf(to, "jitbmm %s: batched semiring matrix products, JIT-compiled for your GPU\n\nusage:\n",
               jitbmm::kVersion);
  for (const CommandHelp& h : kHelp) std::fputs(h.text, to);
  std::fputs(kStrictness, to);
}

void command_usage(const CommandHelp& h) {
  std::printf("usage:\n%s", h.text);
  std::fputs(kStrictness, stdout);
}

// `--help` or `-h` anywhere after a command asks for that command's usage, whatever else is given.
bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  return false;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (const CommandHelp* h = help_of(command); h && asks_for_help(argc, argv)) {
    command_usage(*h);
    return 0;
  }
  try {
    if (command == "demo") return jitbmm::cli::run_demo(argc, argv);
    if (command == "inspect") return jitbmm::cli::run_inspect(argc, argv);
    if (command == "info") return jitbmm::cli::run_info(argc, argv);
    if (command == "bench") return jitbmm::cli::run_bench(argc, argv);
    if (command == "cache") return jitbmm::cli::run_cache(argc, argv);
    if (command == "tune") return jitbmm::cli::run_tune(argc, argv);
    const bool help = command == "help" || command == "--help" || command == "-h";
    const bool version = command == "version" || command == "--version";
    if (command == "help" && argc == 3) { // help <command>
      const CommandHelp* h = help_of(argv[2]);
      if (!h) throw std::invalid_argument("unknown command '" + std::string(argv[2]) + "'");
      command_usage(*h);
      return 0;
    }
    if ((help || version) && argc > 2)
      throw std::invalid_argument("unknown argument '" + std::string(argv[2]) + "' after " + command);
    if (help) {
      usage(stdout);
      return 0;
    }
    if (version) {
      std::printf("jitbmm %s\n", jitbmm::kVersion);
      return 0;
    }
    std::fprintf(stderr, "jitbmm: unknown command '%s'\n\n", command.c_str());
    usage(stderr);
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "jitbmm %s: invalid argument: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jitbmm %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
