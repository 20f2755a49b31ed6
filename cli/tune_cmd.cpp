// jitbmm tune: autotune one problem on this GPU, store the decision (exact shape and its bucket), print the
// candidates compared; with --chain, a chain problem's cluster sizes (cli/tune_chain.cpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "cache/disk_cache.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "runtime/autotune.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/tuner/decisions_file.hpp"

namespace jitbmm::cli {

namespace {

// A decisions file holds a few hundred bytes a decision: one larger than this is not one.
constexpr off_t kMaxDecisionsFileBytes = off_t(64) << 20;

// The regular file at `path`, whole, of at most kMaxDecisionsFileBytes (never a device, a pipe or a directory, which
// could block or never end). What the system refuses is std::runtime_error (exit 1) with its reason.
std::string read_text_file(const std::string& path, const char* flag) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error(std::string(flag) + ": cannot read '" + path + "': " + std::strerror(errno));
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  const int error = errno;
  std::string text;
  int read_error = 0;
  if (stated && S_ISREG(st.st_mode) && st.st_size <= kMaxDecisionsFileBytes) {
    text.resize(std::size_t(st.st_size));
    std::size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, &text[got], text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) read_error = errno;
      if (n <= 0) break; // an error, or the file cut since it was measured (the decoder refuses a cut entry)
      got += std::size_t(n);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!stated || read_error)
    throw std::runtime_error(std::string(flag) + ": cannot read '" + path + "': " +
                             std::strerror(stated ? read_error : error));
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument(std::string(flag) + ": '" + path + "' is not a regular file" +
                                (S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  if (st.st_size > kMaxDecisionsFileBytes)
    throw std::invalid_argument(std::string(flag) + ": '" + path + "' holds " + std::to_string(st.st_size) +
                                " bytes, more than a decisions file (at most " +
                                std::to_string(kMaxDecisionsFileBytes >> 20) + " MiB)");
  return text;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const int error = out ? 0 : errno;
  if (!out || !out.write(text.data(), static_cast<std::streamsize>(text.size())) || !out.flush())
    throw std::runtime_error("--export: cannot write '" + path + "'" +
                             (error ? std::string(": ") + std::strerror(error) : std::string()));
}

// tune --export FILE: every decision of the cache in a decisions file; tune --import FILE: a decisions file's
// decisions into the cache, where none is stored under their keys (runtime/tuner/decisions_file.hpp).
int run_tune_file(const Args& args) {
  if (args.has("--export") && args.has("--import"))
    throw std::invalid_argument("--import: give --export or --import, not both");
  const char* flag = args.has("--export") ? "--export" : "--import";
  args.require_only({flag}, std::string("tune ") + flag);
  const std::string file = args.get(flag, "");
  if (file.empty()) throw std::invalid_argument(std::string(flag) + ": expected a file name");
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) throw std::runtime_error("no disk cache to " + std::string(args.has("--export") ? "export from" : "import into") +
                                      " (JITBMM_CACHE is off, or the cache directory is refused)");
  if (args.has("--export")) {
    const std::vector<DecisionEntry> entries = cache_decisions(*disk);
    write_text_file(file, encode_decisions_file(entries, "exported by jitbmm tune --export"));
    std::printf("%zu decisions exported from %s to %s\n", entries.size(), disk->dir().c_str(), file.c_str());
    return 0;
  }
  const std::vector<DecisionEntry> entries = decode_decisions_file(read_text_file(file, "--import"), file);
  const ImportReport report = import_decisions(*disk, entries, file);
  std::printf("%d decisions imported into %s, %d kept as they were (a decision is stored under their keys)\n",
              report.stored, disk->dir().c_str(), report.kept);
  return 0;
}

} // namespace

int run_tune(int argc, char** argv) {
  const Args args(argc, argv, 2,
                  {"--semiring", "--dtype", "--out-dtype", "--shape", "--pass", "--precision", "--a-layout",
                   "--b-layout", "--data", "--chain", "--batch", "--length", "--reps", "--export", "--import"},
                  {"--argmax", "--hmm"});
  if (args.has("--export") || args.has("--import")) return run_tune_file(args);
  if (args.has("--chain")) {
    args.require_only({"--chain", "--hmm", "--semiring", "--dtype", "--batch", "--length", "--reps"}, "tune --chain");
    return run_chain_tune(args);
  }
  args.require_only({"--semiring", "--dtype", "--out-dtype", "--shape", "--pass", "--precision", "--a-layout",
                     "--b-layout", "--data", "--argmax"},
                    "tune");
  const Problem p = problem_from(args, "tune");
  const Pass pass = parse_flag(args, "--pass", "forward", parse_pass);
  if (pass != Pass::forward && p.with_argmax) // a backward pass's decisions are looked up without it
    throw std::invalid_argument("--argmax: backward kernels read the forward's argmax; drop --argmax with --pass");
  // --data wide: the variant a plan moves to when its repairs show wide-range data (runtime/repair_watch.hpp).
  const InputRange range = parse_input_range(args.get("--data", "normal"));
  if (range == InputRange::wide && pass != Pass::forward)
    throw std::invalid_argument("--data: wide-range tuning is for the forward pass only, not --pass " +
                                std::string(pass_name(pass)));
  // A plan never tunes an empty problem (it launches nothing, or for K = 0 writes the semiring's zero).
  const Shape& s = p.shape;
  if (s.B == 0 || s.M == 0 || s.K == 0 || s.N == 0)
    throw std::invalid_argument("--shape: " + to_string(s) + " is empty: there is nothing to tune");
  const auto device = current_device();
  DiskCache* disk = DiskCache::process_cache();
  // The machine-wide lock a library process takes to tune this bucket, held while tuning and storing: such a process
  // waits, then reads this decision, rather than storing its own quicker tuning's over it.
  const KeyLock lock = disk ? disk->lock(tuning_key(p, tuning_device(*device), true, pass, range),
                                         std::chrono::minutes(10),
                                         [](const std::string& holder) {
                                           std::printf("waiting for %s, which is tuning this bucket\n",
                                                       KeyLock::holder_words(holder).c_str());
                                         })
                            : KeyLock::unavailable("no disk cache");
  const TuneReport report = autotune(p, *device, true, pass, {}, range);
  const bool stored = store_decision(p, *device, report, true, pass, true, range);
  if (stored)
    std::printf("decision stored in %s (exact shape and bucket %s)\n", disk->dir().c_str(),
                to_string(shape_bucket(p.shape)).c_str());
  std::printf("%10s  %s\n", "median ms", "candidate");
  for (const CandidateResult& c : report.candidates)
    std::printf("%10.4f  %s%s\n", c.median_ms, to_string(c.spec).c_str(),
                c.status == "ok" ? "" : ("  [" + c.status + "]").c_str());
  std::printf("best: %s\n", to_string(report.best).c_str());
  if (!disk) {
    std::printf("no disk cache (JITBMM_CACHE=off or no usable directory): nothing stored\n");
    return 0;
  }
  if (!stored) {
    std::fprintf(stderr, "jitbmm: the cache directory %s could not keep the decision: not stored\n",
                 disk->dir().c_str());
    return 1;
  }
  return 0;
}

} // namespace jitbmm::cli
