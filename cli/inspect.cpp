// jitbmm inspect: show what jitbmm generates, and how it compiles and runs here.
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <vector>

#include "cli/args.hpp"
#include "cli/chain_args.hpp"
#include "cli/commands.hpp"
#include "cli/inspect_distributions.hpp"
#include "cli/spec_args.hpp"
#include "generator/chain_source.hpp"
#include "generator/distribution_source.hpp"
#include "generator/emit_source.hpp"
#include "generator/step_source.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/autotune.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/chain_stepped.hpp"
#include "runtime/device.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/jit.hpp"
#include "runtime/kernel_files.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/tuner/trials.hpp"

extern char** environ; // posix_spawn passes ours on

namespace jitbmm::cli {

namespace {

// Resident blocks and warps per SM for the kernel on this machine's GPU, when it has one of the same arch.
void print_occupancy(const GeneratedKernel& kernel, const std::string& arch, int threads) {
  std::shared_ptr<const DeviceInfo> device;
  try {
    device = current_device();
  } catch (const NoDriverError&) {
    std::printf("occupancy:   (no GPU here)\n");
    return;
  }
  if (device->arch() != arch) {
    std::printf("occupancy:   (this GPU is %s, not %s)\n", device->arch().c_str(), arch.c_str());
    return;
  }
  const auto loaded = load_generated(*device, kernel);
  int blocks = 0;
  check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, loaded->function, threads, 0),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  std::printf("occupancy:   %d blocks of %d threads per SM = %d warps (%s, %d registers as loaded)\n", blocks, threads,
              blocks * threads / 32, device->name.c_str(), loaded->registers);
}

void print_resources(const GeneratedKernel& kernel, const std::string& arch, int threads) {
  const CompiledKernel c = compile_to_cubin(kernel, arch, PtxasReport::wanted);
  const PtxasResources r = parse_ptxas_log(c.log, kernel.name);
  std::printf("kernel:      %s\narch:        %s\ncubin bytes: %zu\nregisters:   %d\nstack bytes: %d\n"
              "spill bytes: %d stored, %d loaded\nshared:      %d bytes static\n",
              kernel.name.c_str(), arch.c_str(), c.binary.size(), r.registers, r.stack_bytes, r.spill_store_bytes,
              r.spill_load_bytes, r.shared_bytes);
  print_occupancy(kernel, arch, threads);
  if (r.registers < 0)
    std::printf("(NVRTC returned no ptxas report for this kernel, so registers and spills are unknown here)\n");
  std::printf("ptxas log:\n%s\n", c.log.c_str());
}

// The path of the executable `tool`: the first PATH directory holding it, then the CUDA toolkit's bin; empty when
// absent. The path is only ever an argv element, never shell text, so any character in a directory name is safe.
std::string find_tool(const std::string& tool) {
  std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  dirs += ":/usr/local/cuda/bin";
  std::size_t pos = 0;
  while (pos <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', pos), dirs.size());
    const std::string dir = dirs.substr(pos, end - pos);
    const std::string path = dir + "/" + tool;
    struct stat st {};
    if (!dir.empty() && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0)
      return path;
    pos = end + 1;
  }
  return "";
}

// A private temporary file (mkstemp: mode 0600, a fresh name), removed when this goes out of scope.
class TempFile {
public:
  explicit TempFile(const std::string& prefix) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
    fd_ = ::mkstemp(pattern.data());
    if (fd_ < 0) throw std::runtime_error("cannot create a temporary file " + pattern + ": " + std::strerror(errno));
    path_ = pattern;
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void write_all(const std::string& bytes) {
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("cannot write the temporary file " + path_ + ": " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_ = -1;
  std::string path_;
};

// Runs `argv[0]` (a path, not searched for) with exactly these arguments and no shell; its stderr is ours, its
// stdout is returned. Throws when it cannot start or does not exit with status 0.
std::string run_capturing_stdout(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  std::vector<char*> c_argv;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  std::string out;
  if (spawned == 0) {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(pipe_fds[0]);
  if (spawned != 0) throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(spawned));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid for " + argv[0] + ": " + std::strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(argv[0] + " failed on the cubin (" +
                             (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                : "signal " + std::to_string(WTERMSIG(status))) +
                             ")");
  return out;
}

constexpr const char* kNoNvdisasm =
    "nvdisasm not found on PATH or in /usr/local/cuda/bin: it ships with the CUDA toolkit (install the toolkit's "
    "nvdisasm and put its bin directory on PATH); --emit ptx works without it";

// --emit all prints what it can and says where SASS is missing; --emit sass asked for SASS alone and fails before
// anything is printed (run_inspect).
void print_sass(const GeneratedKernel& kernel, const std::string& arch) {
  const std::string nvdisasm = find_tool("nvdisasm");
  if (nvdisasm.empty()) {
    std::printf("// SASS unavailable: %s\n", kNoNvdisasm);
    return;
  }
  const CompiledKernel c = compile_to_cubin(kernel, arch, PtxasReport::wanted);
  TempFile cubin("jitbmm-sass-");
  cubin.write_all(c.binary);
  const std::string sass = run_capturing_stdout({nvdisasm, "-c", cubin.path()});
  std::printf("// SASS of %s for %s (%s)\n", kernel.name.c_str(), arch.c_str(), nvdisasm.c_str());
  std::fwrite(sass.data(), 1, sass.size(), stdout);
}

// Which variant SemiringBMM::get would run for the problem on this GPU, where that choice came from, and the
// timings the autotuner compared. Never tunes.
int print_tuned(const Problem& p) {
  // JITBMM_TUNE=exact reads no bucket's decision: a plan of this process would tune the exact shape first. (Read
  // first: a malformed value is refused before anything is printed.)
  const TunePolicy policy = tune_policy_from_env();
  const bool exact_only = policy == TunePolicy::exact;
  const auto device = current_device();
  const Choice c = choose(p, *device, TunePolicy::never);
  std::printf("problem:  %s\ndevice:   %s (%s, %d SMs)\nchoice:   %s\nsource:   %s\n", describe(p).c_str(),
              device->name.c_str(), device->arch().c_str(), device->sm_count, to_string(c.spec).c_str(),
              c.source == "default" ? "built-in default (no tuning decision stored for this problem's family; "
                                      "run jitbmm tune)"
                                    : (c.source + " decision").c_str());
  if (exact_only && c.source != "exact" && c.source != "shipped exact")
    std::printf("note:     JITBMM_TUNE=exact: SemiringBMM::get tunes this exact shape instead of taking the %s\n",
                c.source == "default" ? "default" : (c.source + " decision").c_str());
  else if (c.source == "default" && policy != TunePolicy::never && tunable(p))
    std::printf("note:     JITBMM_TUNE=%s: SemiringBMM::get tunes this problem on its first plan and runs what that "
                "tuning chooses (the default only where tuning is held or memory is short)\n",
                tune_policy_name(policy));
  if (!c.decision) return 0;
  const Decision& d = *c.decision;
  const bool shipped = c.source.rfind("shipped ", 0) == 0;
  std::printf("from:     %s\n",
              shipped ? "shipped with jitbmm (tuning/shipped/), checked against the CPU reference on first use"
              : d.origin.empty() ? "tuned here (jitbmm tune, or a first call's tuning)"
                                 : (d.origin + ", checked against the CPU reference on first use").c_str());
  std::printf("tuned:    %s (%s %s) in %.1f s\n", d.problem.c_str(), d.bucket ? "bucket" : "exact shape",
              to_string(d.shape).c_str(), d.seconds);
  if (!d.reason.empty()) std::printf("why:      %s\n", d.reason.c_str());
  std::printf("%10s  %s\n", "median ms", "best candidates compared");
  for (const CandidateResult& r : d.ranking) std::printf("%10.4f  %s\n", r.median_ms, to_string(r.spec).c_str());
  return 0;
}

// The stepped strategy's form on this GPU, as a plan of `kernel` takes it.
std::string stepped_form_text(const ChainProblem& p, const DeviceInfo& device, StepKernel kernel) {
  const SteppedForm form = stepped_form(p, device, kernel);
  if (form.fused) return "fused (one persistent kernel a pass, its blocks meeting between positions)";
  std::string text = "each step one product of the bmm plans";
  if (form.parts > 1) text += ", its sum over the sources in " + std::to_string(form.parts) + " parts";
  if (form.saving_parts > 0)
    text += "; saving the messages, both directions' steps one product, in " + std::to_string(form.saving_parts) +
            " parts each";
  return text;
}

// The strategy a chain plan takes and why: the stored decision (its timings follow), or the rule and which of its
// conditions holds; and why a stored decision's strategy is not the plan's.
std::string chain_strategy_text(const ChainProblem& p, const ChainChoice& c, const DeviceInfo& device) {
  std::string text = c.stepped     ? "stepped, " + stepped_form_text(p, device, c.steps)
                     : c.chunk > 0 ? "chunked, in chunks of " + std::to_string(c.chunk) + " steps"
                                   : "sequential";
  const bool sequential_fits = p.C <= kMaxSequentialChainStates;
  const bool decided = c.stepped ? c.stepped_from_decision : c.chunk_from_decision;
  text += "\nwhy:      ";
  if (!sequential_fits)
    text += "the rule: beyond " + std::to_string(kMaxSequentialChainStates) +
            " states (the sequential kernels' limit) only the stepped strategy computes a chain";
  else if (decided)
    text += "the stored decision (jitbmm tune --chain): the fastest saving forward + backward it timed";
  else if (c.stepped)
    text += "the rule: an HMM's transitions shared by many sequences of many states (each step's product fills the "
            "GPU)";
  else if (c.chunk > 0)
    text +=
        p.semiring == Semiring::max_plus
            ? "the rule: a few sequences of a long chain's best path (chunks of about the square root of its length)"
            : "the rule: a few sequences of a long log chain";
  else
    text += "the rule: neither a few sequences of a long chain (chunked) nor an HMM's transitions shared by many "
            "sequences of many states (stepped)";
  if (c.decision && sequential_fits && !c.decision->stepped)
    text += c.decision->chunk ? "; the stored decision predates the stepped strategy's tuning"
                              : "; the stored decision predates the strategies' tuning";
  else if (c.decision && sequential_fits && !decided)
    text += "; the stored decision's chunks do not fit this problem";
  // The stepped strategy's form: the decision's where it timed the fused form and the problem takes what it chose.
  if (c.stepped && c.steps != StepKernel::rule)
    text += "; its form, the stored decision's (the faster of the forms it timed)";
  else if (c.stepped && c.decision && c.decision->stepped_fused)
    text += "; its form, the rule's (the fused form the stored decision chose does not compute this problem)";
  else if (c.stepped)
    text += "; its form, the rule's";
  return text;
}

// Which variant ChainPlan::get would run for a chain problem on this GPU, whether a stored decision chose its
// clusters and its strategy, and the timings that decision holds. Never tunes.
int print_chain_tuned(const ChainProblem& p) {
  const auto device = current_device();
  const ChainChoice c = choose_chain_spec(p, *device);
  const std::optional<ChainDecision>& d = c.decision;
  std::printf("problem:  chain %s\ndevice:   %s (%s, %d SMs)\n", chain_bucket_text(p).c_str(), device->name.c_str(),
              device->arch().c_str(), device->sm_count);
  // The sequential kernels' variant (what bench --chain compares the stepped strategy with, where the plan takes it);
  // none beyond their states.
  if (p.C <= kMaxSequentialChainStates)
    std::printf("choice:   %s%s\nsource:   %s\n",
                c.stepped ? "the stepped strategy; beside it the sequential kernels' " : "", to_string(c.spec).c_str(),
                c.from_decision ? "stored decision (jitbmm tune --chain)"
                : d             ? "the rule (the stored decision's clusters do not fit this problem's registers)"
                                : "the rule (no decision stored for this bucket; run jitbmm tune --chain)");
  std::printf("strategy: %s\n", chain_strategy_text(p, c, *device).c_str());
  if (!d) return 0;
  if (d->timed.empty())
    std::printf("tuned:    in %.1f s: the stepped strategy alone\n", d->seconds);
  else
    std::printf("tuned:    in %.1f s: clusters %d (forward%s) and %d (saving forward)\n", d->seconds,
                d->forward_cluster,
                d->forward_lanes ? (", in groups of " + std::to_string(*d->forward_lanes) + " lanes").c_str() : "",
                d->saving_cluster);
  std::printf("%8s %10s %12s %10s %10s\n", "variant", "fwd ms", "fwd+kept ms", "backward", "kept+bwd");
  auto row = [](const std::string& variant, double forward_ms, double saving_ms, double backward_ms) {
    std::printf("%8s %10.4f %12.4f %10.4f %10.4f\n", variant.c_str(), forward_ms, saving_ms, backward_ms,
                saving_ms + backward_ms);
  };
  for (const ChainTiming& t : d->timed) row(std::to_string(t.cluster), t.forward_ms, t.saving_ms, t.backward_ms);
  for (const ChunkTiming& t : d->chunked)
    row("chunk " + std::to_string(t.chunk), t.forward_ms, t.saving_ms, t.backward_ms);
  for (const LanesTiming& t : d->lanes)
    row("lanes " + std::to_string(t.lanes), t.forward_ms, t.saving_ms, t.backward_ms);
  if (const auto& t = d->stepped_timing) row("steps", t->forward_ms, t->saving_ms, t->backward_ms);
  if (const auto& t = d->fused_timing) row("fused", t->forward_ms, t->saving_ms, t->backward_ms);
  return 0;
}

} // namespace

int run_inspect(int argc, char** argv) {
  std::set<std::string> flags = spec_flags();
  flags.insert({"--arch", "--emit", "--chain", "--cluster", "--threads", "--lanes", "--beta-lanes", "--saving-blocks",
                "--batch", "--length", "--kbest", "--field"});
  std::set<std::string> switches = spec_switches();
  switches.insert({"--tuned", "--hmm", "--chunks", "--stepped", "--fused", "--streamed", "--paired", "--beta",
                   "--backward", "--saving", "--expectation", "--samples"});
  const Args args(argc, argv, 2, flags, switches);
  if (args.has("--tuned") && args.has("--chain")) {
    args.require_only({"--tuned", "--chain", "--hmm", "--semiring", "--dtype", "--batch", "--length"},
                      "inspect --tuned --chain");
    return print_chain_tuned(sized_chain_problem_from(args));
  }
  if (args.has("--tuned")) {
    std::set<std::string> used = problem_flags();
    used.insert({"--argmax", "--tuned"});
    args.require_only(used, "inspect --tuned");
    return print_tuned(problem_from(args, "inspect --tuned"));
  }
  const std::string emit = args.get("--emit", "cuda");
  const bool all = emit == "all";
  if (emit != "cuda" && emit != "ptx" && emit != "sass" && emit != "resources" && !all)
    throw std::invalid_argument("--emit: expected cuda, ptx, sass, resources or all, got '" + emit + "'");
  if (emit == "cuda" && args.has("--arch") && !dump_requested())
    throw std::invalid_argument("--arch: not used by --emit cuda (the source is the same for every arch)");
  const std::string arch = arch_from(args);
  if (emit != "cuda" || dump_requested()) require_nvrtc_targets(arch); // the source alone needs no NVRTC
  if (emit == "sass" && find_tool("nvdisasm").empty())
    throw std::runtime_error(std::string("--emit sass: ") + kNoNvdisasm);
  GeneratedKernel kernel;
  int threads = 0;
  if (args.has("--chain") && args.has("--chunks")) { // the chunked strategy's module: the dtype and C alone
    args.require_only({"--chain", "--chunks", "--semiring", "--dtype", "--emit", "--arch"}, "inspect --chain --chunks");
    const ChainProblem problem = chain_problem_from(args, 1, 2);
    // The module depends on the semiring, the dtype and C alone: what refuses those, not a problem's size.
    if (const std::string why = chunk_unfit(problem, 2); why.rfind("chunk: chains of at most", 0) == 0)
      throw std::invalid_argument("--chunks" + why.substr(std::string("chunk").size()));
    kernel = with_override(emit_chunk_kernel(problem.semiring, problem.dtype, int(problem.C)));
    threads = kChunkThreads;
  } else if (distribution_module(args, arch, kernel, threads)) { // entropy, KL, samples, the k best paths
  } else if (args.has("--chain") && (args.has("--stepped") || args.has("--fused"))) {
    // The stepped strategy's own module (every C), or its fused form's (the HMM form with one shared table): the
    // semiring and the dtype alone, and the form for the former.
    args.require_only({"--chain", "--hmm", "--stepped", "--fused", "--streamed", "--paired", "--beta", "--backward",
                       "--semiring", "--dtype", "--emit", "--arch"},
                      "inspect --chain --stepped");
    if (!args.has("--stepped")) throw std::invalid_argument("--fused: a form of the stepped strategy (with --stepped)");
    for (const char* pass : {"--streamed", "--paired", "--beta"})
      if (args.has(pass) && !args.has("--fused"))
        throw std::invalid_argument(std::string(pass) + ": a pass of the fused form (with --fused)");
    if (args.has("--backward") && args.has("--fused"))
      throw std::invalid_argument("--backward: the step module's backward unit (the fused form's is --beta)");
    const ChainProblem problem = chain_problem_from(args, 1, 2);
    if (args.has("--fused") && problem.form != ChainForm::hmm)
      throw std::invalid_argument("--fused: the fused steps compute the HMM form (with --hmm)");
    try {
      kernel =
          with_override(args.has("--fused")
                            ? emit_fused_step_kernel(problem.semiring, problem.dtype, args.has("--beta"),
                                                     !args.has("--streamed"), args.has("--paired"))
                            : emit_step_kernel(problem.semiring, problem.dtype, problem.form, args.has("--backward")));
    } catch (const std::invalid_argument& e) { // the generator names its argument; the flag that gave it
      const std::string why = e.what();
      if (why.rfind("dtype: ", 0) == 0 || why.rfind("beta: ", 0) == 0 || why.rfind("paired: ", 0) == 0)
        throw std::invalid_argument("--" + why);
      throw;
    }
    // The occupancy reported is the main entry's.
    threads = !args.has("--fused")     ? kStepThreads
              : args.has("--streamed") ? jb::kFusedBlock
                                       : jb::fused_resident_threads(problem.semiring == Semiring::log);
  } else if (args.has("--chain")) { // the sequential kernels: the forward's unit, or --saving's or --backward's
    args.require_only({"--chain", "--hmm", "--semiring", "--dtype", "--cluster", "--threads", "--lanes", "--beta-lanes",
                       "--saving-blocks", "--saving", "--backward", "--emit", "--arch"},
                      "inspect --chain");
    if (args.has("--saving") && args.has("--backward"))
      throw std::invalid_argument("--saving: one unit at a time (--saving or --backward)");
    // No device: one block per sequence unless --cluster says otherwise.
    const ChainProblem problem = chain_problem_from(args, 1, 2);
    const ChainSpec spec = chain_spec_from(args, problem, default_chain_spec(problem));
    if (spec.forward.cluster > 1 && !arch_features(parse_sm(arch, "--arch")).has(kClusters))
      throw std::invalid_argument("--cluster: needs " + missing_features(kClusters, {}) + ", which --arch " + arch +
                                  " lacks");
    if (args.has("--saving") && problem.semiring != Semiring::log)
      throw std::invalid_argument("--saving: log's saving forward (max_plus's forward with the path is the forward)");
    const ChainUnit unit = args.has("--saving")     ? ChainUnit::saving
                           : args.has("--backward") ? ChainUnit::backward
                                                    : ChainUnit::forward;
    kernel = with_override(emit_chain_kernel(spec, unit));
    // The occupancy reported is the unit's main entry's.
    threads = unit == ChainUnit::forward       ? spec.forward.threads
              : unit == ChainUnit::saving      ? spec.saving.threads
              : problem.form == ChainForm::hmm ? kHmmNodeThreads
                                               : spec.backward_threads;
  } else {
    std::set<std::string> used = spec_flags();
    used.merge(spec_switches());
    used.insert({"--arch", "--emit"});
    args.require_only(used, "inspect of a product's kernel (the chain flags need --chain)");
    const KernelSpec spec = spec_from(args, problem_from(args, "inspect", {{"--emit", "cuda"}}));
    kernel = with_override(emit_kernel(spec));
    threads = spec.threads();
  }
  if (emit == "cuda" || all) std::cout << kernel.source << std::flush;
  if (emit == "ptx" || all) std::cout << compile_to_ptx(kernel, "compute_" + arch.substr(3)).binary << std::flush;
  if (emit == "sass" || all) print_sass(kernel, arch);
  if (emit == "resources" || all) print_resources(kernel, arch, threads);
  if (dump_requested()) dump_kernel(kernel, compile_to_ptx(kernel, "compute_" + arch.substr(3)).binary);
  return 0;
}

} // namespace jitbmm::cli
