// The CLI's help (cli/help.hpp) against the tables it describes: which strategies read each variant flag (the
// strategy table's fields) and the --math values.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/help.hpp"
#include "generator/strategy.hpp"

using namespace jitbmm;

namespace {

// The text with each line break and the indent after it as one space, so a sentence reads whole however it wraps.
std::string unwrapped(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out += text[i];
      continue;
    }
    while (i + 1 < text.size() && text[i + 1] == ' ') ++i;
    out += ' ';
  }
  return out;
}

std::vector<std::string> split(const std::string& text, const std::string& by) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t at = text.find(by, pos);
    parts.push_back(text.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
    if (at == std::string::npos) return parts;
    pos = at + by.size();
  }
}

const std::string& inspect_help() {
  const cli::CommandHelp* help = cli::help_of("inspect");
  REQUIRE(help != nullptr);
  return help->text;
}

} // namespace

TEST_CASE("the CLI's help names, for each variant flag, exactly the strategies whose fields read it") {
  // The KernelSpec fields each flag sets, as cli/spec_args.hpp parses them.
  const std::map<std::string, unsigned> fields_of = {{"--block", kBlockFields},    {"--tile", kTileFields},
                                                     {"--thread", kTileFields},    {"--min-blocks", kTileFields},
                                                     {"--k-chunk", kKChunkField}, {"--math", kMathField}};
  const std::string text = unwrapped(inspect_help());
  const std::string lead = "Variant flags apply to the strategies that read them (";
  const std::size_t begin = text.find(lead);
  REQUIRE(begin != std::string::npos);
  const std::size_t end = text.find(").", begin);
  REQUIRE(end != std::string::npos);
  // "--block: linear, warp; --tile, --thread: tiled": each flag's strategies, as the help lists them.
  std::map<std::string, std::vector<std::string>> listed;
  for (const std::string& group : split(text.substr(begin + lead.size(), end - begin - lead.size()), "; ")) {
    const std::vector<std::string> sides = split(group, ": ");
    REQUIRE_MESSAGE(sides.size() == 2, group);
    for (const std::string& flag : split(sides[0], ", ")) {
      CHECK_MESSAGE(listed.count(flag) == 0, flag << " listed twice");
      listed[flag] = split(sides[1], ", ");
    }
  }
  for (const auto& [flag, fields] : fields_of) {
    std::set<std::string> readers;
    for (const StrategyDef* d : strategy_defs())
      if (d->fields & fields) readers.insert(d->name);
    const std::vector<std::string>& names = listed[flag];
    CHECK_MESSAGE(std::set<std::string>(names.begin(), names.end()) == readers, flag);
    CHECK_MESSAGE(std::set<std::string>(names.begin(), names.end()).size() == names.size(), flag << ": a name twice");
  }
  CHECK(listed.size() == fields_of.size()); // no flag the test does not know
  // Every variant flag the CLI accepts is one the help describes.
  for (const cli::VariantFlag& v : cli::variant_flags()) CHECK_MESSAGE(fields_of.count(v.flag) == 1, v.flag);
}

TEST_CASE("the CLI's help lists every --math value once") {
  const std::string& text = inspect_help();
  const std::string lead = "[--math ";
  const std::size_t begin = text.find(lead);
  REQUIRE(begin != std::string::npos);
  const std::size_t end = text.find(']', begin);
  REQUIRE(end != std::string::npos);
  const std::vector<std::string> names = split(text.substr(begin + lead.size(), end - begin - lead.size()), "|");
  std::set<Math> listed;
  for (const std::string& name : names) listed.insert(parse_math(name));
  CHECK(names.size() == static_cast<std::size_t>(math_count()));
  CHECK(listed.size() == names.size());
  for (int i = 0; i < math_count(); ++i) CHECK(listed.count(static_cast<Math>(i)) == 1);
}
