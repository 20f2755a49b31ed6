// Golden sources: every forward and backward spec of tests/variants.hpp renders to the source recorded in
// host/golden_sources.txt (a digest of it, independent of kVersion). A refactoring of the generator must leave
// this file unchanged; a deliberate change of generated code regenerates it with JITBMM_UPDATE_GOLDEN=1 and shows
// in review which kernels changed.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "support/sha256.hpp"
#include "generator/emit_source.hpp"
#include "jitbmm/version.hpp"
#include "variants.hpp"

using namespace jitbmm;

namespace {

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// "<readable name> <16 hex of the source's SHA-256>", with the kernel name and the version taken out of the source
// first (the name's own hash covers the version).
std::string fingerprint(const KernelSpec& spec) {
  const GeneratedKernel k = emit_kernel(spec);
  std::string source = k.source;
  replace_all(source, k.name, "KERNEL_NAME");
  replace_all(source, std::string("jitbmm ") + kVersion + ".", "jitbmm VERSION.");
  return k.name.substr(0, k.name.rfind('_')) + ' ' + sha256_hex(source).substr(0, 16);
}

} // namespace

TEST_CASE("every variant's generated source equals the golden one") {
  std::map<std::string, std::string> now; // spec → fingerprint
  for (const auto& list : {test::all_variants(), test::grad_variants()})
    for (const KernelSpec& spec : list) now[to_string(spec)] = fingerprint(spec);
  if (const char* update = std::getenv("JITBMM_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream out(JITBMM_GOLDEN_SOURCES);
    for (const auto& [spec, print] : now) out << spec << '\t' << print << '\n';
    REQUIRE(out.good());
    MESSAGE("rewrote " << JITBMM_GOLDEN_SOURCES);
    return;
  }
  std::ifstream in(JITBMM_GOLDEN_SOURCES);
  REQUIRE_MESSAGE(in.good(), "cannot read " << JITBMM_GOLDEN_SOURCES);
  std::map<std::string, std::string> golden;
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    golden[line.substr(0, tab)] = line.substr(tab + 1);
  }
  CHECK(golden.size() == now.size());
  for (const auto& [spec, print] : now) {
    CAPTURE(spec);
    const auto it = golden.find(spec);
    REQUIRE_MESSAGE(it != golden.end(), "not in the golden file");
    CHECK(it->second == print);
  }
}
