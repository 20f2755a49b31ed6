// jitbmm: the command-line tool. Subcommands live in their own files; this one only dispatches and reports errors.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/version.hpp"

namespace {

using jitbmm::cli::CommandHelp;
using jitbmm::cli::command_help;
using jitbmm::cli::help_of;
using jitbmm::cli::kStrictness;

void usage(std::FILE* to) {
  std::fprintf(to, "jitbmm %s: batched semiring matrix products, JIT-compiled for your GPU\n\nusage:\n",
               jitbmm::kVersion);
  for (const CommandHelp& h : command_help()) std::fputs(h.text.c_str(), to);
  std::fputs(kStrictness, to);
}

void command_usage(const CommandHelp& h) {
  std::printf("usage:\n%s", h.text.c_str());
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
    if ((help || version) && argc > 2) { // the first argument that is not one: after help <command>, the third
      const int extra = command == "help" && help_of(argv[2]) ? 3 : 2;
      throw std::invalid_argument("unknown argument '" + std::string(argv[extra]) + "' after " +
                                  (extra == 3 ? command + " " + argv[2] : command));
    }
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
  } catch (const std::bad_alloc&) { // the host copies of a problem's operands, outputs and their reference
    std::fprintf(stderr, "jitbmm %s: error: not enough host memory for this problem's buffers (its --shape, or "
                         "--batch and --length)\n", command.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jitbmm %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
