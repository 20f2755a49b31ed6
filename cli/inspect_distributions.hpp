// jitbmm inspect's modules of the chains' structured distributions (docs/distributions.md): --chain C with
// --expectation (entropy, cross-entropy and KL), --kbest K (the k best paths) or --samples (exact samples).
#pragma once

#include <string>

#include "cli/args.hpp"
#include "generator/emit_source.hpp"

namespace jitbmm::cli {

// Where `args` name one of those modules: it, generated (with the user's override, if any) for the dtype and C they
// give, and the threads of a block of its main entry; true. Else false, and nothing set. Flags that do not apply, and
// values the generator refuses, are errors naming the flag.
bool distribution_module(const Args& args, const std::string& arch, GeneratedKernel& kernel, int& threads);

} // namespace jitbmm::cli
