#include "runtime/tuner/shared_choices.hpp"

#include <sstream>
#include <stdexcept>
#include <vector>

#include "cache/disk_cache.hpp"
#include "generator/needed_features.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/autotune.hpp"
#include "runtime/tuner/choose.hpp"
#include "runtime/tuner/tuning_db.hpp"
#include "support/log.hpp"

namespace jitbmm {

std::string problem_text(const Problem& p) {
  std::ostringstream os;
  os << semiring_info(p.semiring).name << ' ' << dtype_info(p.dtype).name << ' ' << dtype_info(p.output_dtype()).name
     << ' ' << p.shape.B << ' ' << p.shape.M << ' ' << p.shape.K << ' ' << p.shape.N;
  for (const Strides& st : {p.a(), p.b(), p.out()}) os << ' ' << st.batch << ' ' << st.row << ' ' << st.col;
  os << ' ' << (p.with_argmax ? 1 : 0) << ' ' << precision_name(p.precision);
  return os.str();
}

Problem parse_problem_text(const std::string& text) {
  std::istringstream in(text);
  std::string semiring, dtype, out_dtype, precision, rest;
  Problem p;
  Strides a, b, out;
  int argmax = -1;
  if (!(in >> semiring >> dtype >> out_dtype >> p.shape.B >> p.shape.M >> p.shape.K >> p.shape.N >> a.batch >>
        a.row >> a.col >> b.batch >> b.row >> b.col >> out.batch >> out.row >> out.col >> argmax >> precision) ||
      (in >> rest) || (argmax != 0 && argmax != 1))
    throw std::invalid_argument("problem: expected 'semiring dtype out_dtype B M K N' and three stride triples, argmax "
                                "(0 or 1) and precision, got '" + text + "'");
  p.semiring = parse_semiring(semiring);
  p.dtype = parse_dtype(dtype);
  p.out_dtype = parse_dtype(out_dtype);
  p.a_strides = a, p.b_strides = b, p.out_strides = out;
  p.with_argmax = argmax == 1;
  p.precision = parse_precision(precision);
  validate(p);
  return p;
}

namespace {
// The device whose choices these are, as the text names it: its architecture and feature level, and its name.
std::string device_words(const DeviceInfo& device) { return device.arch_and_level() + ' ' + device.name; }
} // namespace

std::string export_choices() {
  const std::vector<MadeChoice> made = choices_made();
  if (made.empty()) return "";
  std::ostringstream os;
  os << "device " << device_words(*current_device()) << '\n';
  for (const MadeChoice& c : made)
    os << "choice " << pass_name(c.pass) << ' ' << problem_text(c.problem) << " | " << to_string(c.spec) << '\n';
  return os.str();
}

std::size_t import_choices(const std::string& text) {
  struct Parsed {
    Problem problem;
    Pass pass;
    KernelSpec spec;
  };
  std::vector<Parsed> parsed;
  std::string exporter; // the "device" line's words: where the choices were made (and checked)
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    if (line.rfind("device ", 0) == 0 && parsed.empty() && exporter.empty()) {
      exporter = line.substr(7);
      continue;
    }
    try {
      const std::size_t bar = line.find(" | ");
      if (line.rfind("choice ", 0) != 0 || bar == std::string::npos)
        throw std::invalid_argument("expected 'choice <pass> <problem> | <spec>'");
      const std::size_t space = line.find(' ', 7);
      if (space == std::string::npos || space > bar) throw std::invalid_argument("no pass");
      Parsed c{parse_problem_text(line.substr(space + 1, bar - space - 1)), parse_pass(line.substr(7, space - 7)),
               parse_spec(line.substr(bar + 3))};
      if (c.spec.pass != c.pass)
        throw std::invalid_argument(std::string("the variant is of the pass ") + pass_name(c.spec.pass) +
                                    ", the choice of " + pass_name(c.pass));
      check_spec_fits(c.spec, c.problem);
      parsed.push_back(std::move(c));
    } catch (const std::exception& e) {
      throw std::invalid_argument("choices: line " + std::to_string(number) + ": " + e.what());
    }
  }
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) throw std::runtime_error("import_choices: no disk cache to keep the decisions in (JITBMM_CACHE=off?)");
  // A rank that kept none would plan its own variants while saying it took rank 0's.
  if (!disk->usable() || disk->read_only())
    throw std::runtime_error("import_choices: the cache directory " + disk->dir() +
                             " cannot keep decisions (" + (disk->usable() ? "read-only" : "not usable") +
                             "); a writable JITBMM_CACHE_DIR is needed to share choices");
  const auto device = current_device();
  const TuningDevice td = tuning_device(*device);
  std::size_t stored = 0, unrunnable = 0;
  for (const Parsed& c : parsed) {
    if (!device->features.has(needed_features(c.spec))) { // another GPU's variant (wgmma on an A100, say)
      ++unrunnable;
      continue;
    }
    TuneReport report;
    report.best = c.spec;
    report.reason = "shared: another process's choice (import_choices)";
    Decision d = decision_from(c.problem, td, report, c.pass);
    // Made (and checked, as every choice is) on a GPU like this one: trusted as this machine's own. Made on another
    // kind, or by an exporter that did not say: brought in, so checked against the CPU reference on first use.
    if (exporter != device_words(*device))
      d.origin = "another process's choice, on " + (exporter.empty() ? "a device it did not name" : exporter);
    if (!put_decision(*disk, tuning_key(c.problem, td, false, c.pass), d)) {
      forget_choices(); // those stored serve from now on
      throw std::runtime_error("import_choices: the cache directory " + disk->dir() + " could not keep a decision; " +
                               std::to_string(stored) + " of " + std::to_string(parsed.size()) + " were stored");
    }
    ++stored;
  }
  if (unrunnable)
    log_message(LogLevel::warn, "choices: " + std::to_string(unrunnable) + " of another process's variants need " +
                                    "features " + device->arch_and_level() + " lacks; this process keeps its own for " +
                                    "those problems");
  forget_choices();
  return stored;
}

} // namespace jitbmm
