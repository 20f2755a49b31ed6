// jitbmm: the command-line tool. Subcommands live in their own files; this one only dispatches and reports errors.
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/version.hpp"

namespace {

void usage(std::FILE* to) {
  std::fprintf(
      to,
      "jitbmm %s: batched semiring matrix products, JIT-compiled for your GPU\n\n"
      "usage:\n"
      "  jitbmm demo [--shape BxMxKxN]\n"
      "      On a GPU: run the log semiring (default 64x512x512x512, f32), verify a sample against the CPU\n"
      "      reference, print time, terms/s and the share of the measured exp throughput.\n"
      "      Without a GPU: say so, NVRTC-compile the same kernel for sm_90, run the CPU reference.\n"
      "  jitbmm inspect --semiring S --dtype D --shape BxMxKxN [--out-dtype D] [--argmax]\n"
      "                 [--strategy S] [--pass grad_a|grad_b] [--block XxY] [--tile MxNxK] [--thread MxN]\n"
      "                 [--min-blocks N] [--k-chunk N] [--precision exact|fast]\n"
      "                 [--math fma|tf32x3|tf32|wgmma_tf32x3|wgmma_tf32|bf16|wgmma_bf16|wgmma_bf16_fused]\n"
      "                 [--a-layout row|col|broadcast] [--b-layout row|col|broadcast]\n"
      "                 [--index64] [--arch sm_90]\n"
      "                 --emit cuda|ptx|sass|resources|all\n"
      "      Print the generated source, NVRTC's PTX, SASS (via nvdisasm), or ptxas's resource report (no GPU "
      "needed).\n"
      "      --semiring, --dtype, --shape and --emit default to log, f32, 64x512x512x512 and cuda; a command that\n"
      "      relies on a default says which on stderr (so do tune and bench). --a-layout / --b-layout: an operand\n"
      "      row-major (default), column-major (transposed in memory) or one matrix for every batch (broadcast).\n"
      "      Variant flags apply to the\n"
      "      strategies that read them (--block: linear, linear_two_pass, warp, block_tree, scatter, histogram;\n"
      "      --tile,"
      "      --thread, --min-blocks: tiled, split_k, exp_matmul, tiled_online, tiled_refine; --k-chunk:\n"
      "      split_k; --math: exp_matmul).\n"
      "  jitbmm inspect --tuned [problem flags]\n"
      "      Which variant this GPU runs for the problem, where the choice came from (exact, bucket or nearest\n"
      "      bucket decision, or the default) and the timings of the best candidates the autotuner compared.\n"
      "  jitbmm tune [problem flags] [--pass forward|grad_a|grad_b] [--data normal|wide]\n"
      "      Autotune one problem on this GPU; store the decision for its exact shape and its bucket. --data wide\n"
      "      times on randn*50 inputs: the variant a plan moves to when its repairs show wide-range data.\n"
      "  jitbmm bench [--json] [--reps N] [problem and variant flags as for inspect]\n"
      "      Benchmark (GPU): with no problem flags, the standard table of shapes and strategies.\n"
      "  jitbmm bench --first-call [problem flags]    time from start to the first result, NVRTC calls\n"
      "  jitbmm bench --backward [problem flags]      forward and backward times, memory, sampled check\n"
      "  jitbmm bench --exp-matmul [--shape S] [--dtype D]  exp_matmul vs the direct kernels on randn, randn*50,\n"
      "      randn*500 and banded -inf inputs: time, terms/s, relative error of a sample, share repaired\n"
      "  jitbmm bench --compile-times [problem flags] [--arch sm_XY] [--verbose]\n"
      "      NVRTC compile time of each tuning candidate (no GPU needed).\n"
      "  jitbmm cache path|list|verify|clear\n"
      "      The disk cache of compiled kernels ($JITBMM_CACHE_DIR, $XDG_CACHE_HOME/jitbmm or ~/.cache/jitbmm).\n"
      "  jitbmm info\n"
      "      Driver, NVRTC and devices.\n"
      "  jitbmm version | --version\n"
      "      Print the version.\n\n"
      "Arguments are strict: an unknown flag, a flag given twice, a flag without its value, a number that is not\n"
      "a whole integer in range, or a flag the chosen command, mode or strategy does not use is an error (exit\n"
      "status 2) naming the flag; nothing is silently ignored.\n",
      jitbmm::kVersion);
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  try {
    if (command == "demo") return jitbmm::cli::run_demo(argc, argv);
    if (command == "inspect") return jitbmm::cli::run_inspect(argc, argv);
    if (command == "info") return jitbmm::cli::run_info(argc, argv);
    if (command == "bench") return jitbmm::cli::run_bench(argc, argv);
    if (command == "cache") return jitbmm::cli::run_cache(argc, argv);
    if (command == "tune") return jitbmm::cli::run_tune(argc, argv);
    const bool help = command == "help" || command == "--help" || command == "-h";
    const bool version = command == "version" || command == "--version";
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
