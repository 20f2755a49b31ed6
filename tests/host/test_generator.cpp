#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <set>
#include <stdexcept>

#include "generator/chain_source.hpp"
#include "generator/emit_source.hpp"
#include "generator/step_source.hpp"
#include "support/sha256.hpp"
#include "templates/core/params.cuh"
#include "variants.hpp"

using namespace jitbmm;

TEST_CASE("sha256 is the real SHA-256") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding's one-or-two-block boundary (bytes (7i + 3) mod 251, digests from Python's hashlib).
  const std::pair<int, const char*> sizes[] = {
      {55, "1deace58c745f3ecadde68a5923f494c3703fa73f0306483ccb898a5826e8d70"},
      {56, "06dbe23685750e4d3881ded95047abaf93fa8f9c5d3501dc57c717a72ff1398e"},
      {63, "47fb38b12335c9298d09280515c0666489a189d1554bb0ac1a0740806ce9d8b6"},
      {64, "dfa798724b1a8014994f363e5da7474ed26ce3757fb29e07aa47ad5a9352d37b"},
      {65, "dd2eab5a5507d7717c63ce953d9ac61752c21e664425ad1227054722a0d97f69"},
      {119, "c6e0f435df5d7d265baacca31e0602c00aa22fa6d3819aed664649294c743756"},
      {120, "17eb8960823a644bde3065620bb9d45931fe8993fd8eb692a17aff0fd725db6a"},
      {1000, "a9425c416f534025a4e2422bd14adba4ec3d4a68d10c3329be8df612964d2b6e"}};
  for (const auto& [n, digest] : sizes) {
    std::string bytes(n, '\0');
    for (int i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 7 + 3) % 251);
    CAPTURE(n);
    CHECK(sha256_hex(bytes) == digest);
  }
}

TEST_CASE("generated source is deterministic, self-contained and names its spec") {
  KernelSpec spec;
  const GeneratedKernel a = emit_kernel(spec), b = emit_kernel(spec);
  CHECK(a.name == b.name);
  CHECK(a.source == b.source);
  CHECK(std::regex_match(a.name, std::regex("log_f32_linear_b32x8_[0-9a-f]{8}")));
  CHECK(a.source.find("// spec: " + to_string(spec)) != std::string::npos);
  CHECK(a.source.find("extern \"C\" __global__ void __launch_bounds__(256, 1) " + a.name + "(") != std::string::npos);
  CHECK(a.source.find("#include") == std::string::npos); // templates inlined
  CHECK(a.source.find("#pragma once") == std::string::npos);
  CHECK(a.source.find("struct LogSemiring") != std::string::npos);
  CHECK(a.source.find("JITBMM_KERNEL_NAME") == std::string::npos);
  CHECK(a.source.find("sizeof(jb::BmmParams) == " + std::to_string(sizeof(jb::BmmParams))) != std::string::npos);
}

namespace {
// The framed names, in order, of what inline_templates emits.
std::vector<std::string> framed(const std::string& source) {
  std::vector<std::string> names;
  const std::regex frame("// ---- templates/(\\S+) ----");
  for (std::sregex_iterator it(source.begin(), source.end(), frame), end; it != end; ++it) names.push_back((*it)[1]);
  return names;
}
} // namespace

TEST_CASE("templates are inlined once each, after what they include, without include lines") {
  const std::map<std::string, std::string> files = {
      {"core/a.cuh", "#pragma once\nA\n"},
      {"core/b.cuh", "#pragma once\n#include \"core/a.cuh\"\nB\n"},
      {"fam/c.cuh", "#pragma once\n  #  include \"core/b.cuh\"\n#include \"core/a.cuh\"\nC\n"},
      {"fam/d.cuh", "#pragma once\n#include \"core/a.cuh\"\n#include \"fam/c.cuh\"\nD\n"},
      {"cyc/x.cuh", "#include \"cyc/y.cuh\"\n"},
      {"cyc/y.cuh", "#include \"cyc/x.cuh\"\n"},
      {"bad/system.cuh", "#include <cstdio>\n"},
  };
  const TemplateTexts text_of = [&](std::string_view path) -> std::string_view {
    const auto it = files.find(std::string(path));
    if (it == files.end()) throw std::logic_error("no template " + std::string(path));
    return it->second;
  };
  const std::string out = inline_templates({"fam/d.cuh", "fam/c.cuh"}, text_of);
  CHECK(framed(out) == std::vector<std::string>{"core/a.cuh", "core/b.cuh", "fam/c.cuh", "fam/d.cuh"});
  CHECK(out.find("include") == std::string::npos);
  CHECK(out.find("#pragma once") == std::string::npos);
  CHECK(out.find("A\n") < out.find("B\n"));
  CHECK(out.find("C\n") < out.find("D\n"));
  CHECK_THROWS_WITH_AS(inline_templates({"cyc/x.cuh"}, text_of), doctest::Contains("cycle"), std::logic_error);
  CHECK_THROWS_WITH_AS(inline_templates({"bad/system.cuh"}, text_of), doctest::Contains("<cstdio>"), std::logic_error);
  CHECK_THROWS_AS(inline_templates({"core/none.cuh"}, text_of), std::logic_error);
}

TEST_CASE("a generated source holds only the templates its kernel's entry headers reach") {
  KernelSpec plus; // the generic tiled kernel: no log, packed, online or exp_matmul code, no direct reductions
  plus.strategy = Strategy::tiled;
  plus.semiring = Semiring::plus_times;
  CHECK(framed(emit_kernel(plus).source) == std::vector<std::string>{"core/params.cuh", "core/features.cuh",
                                                                     "core/dtypes.cuh", "core/numbers.cuh", "core/semirings.cuh",
                                                                     "core/kslice.cuh", "tiled/tile.cuh",
                                                                     "tiled/tiled.cuh", "core/grid_dependency.cuh"});
  KernelSpec log = plus;
  log.semiring = Semiring::log;
  const std::vector<std::string> parts = framed(emit_kernel(log).source);
  REQUIRE(parts.size() >= 2);
  CHECK(parts[parts.size() - 2] == "tiled/log.cuh"); // then the frame's own template
  CHECK(parts.back() == "core/grid_dependency.cuh");
  CHECK(std::set<std::string>(parts.begin(), parts.end()).size() == parts.size());
}

TEST_CASE("every entry point of a generated unit waits for the grids before it first, and lets the next in last") {
  KernelSpec forward; // an entry with a prologue (the run_if flag, which a kernel before it may write)
  KernelSpec grad = forward;
  grad.pass = Pass::grad_a;
  grad.strategy = Strategy::tiled;
  const std::string first = "  jb::wait_for_prior_grids();\n", last = "(p);\n  jb::let_dependent_grids_launch();\n}\n";
  for (const GeneratedKernel& k :
       {emit_kernel(forward), emit_kernel(grad), emit_step_kernel(Semiring::log, DType::f32, ChainForm::hmm),
        emit_step_kernel(Semiring::log, DType::f32, ChainForm::hmm, true),
        emit_fused_step_kernel(Semiring::max_plus, DType::f32, false, true)}) {
    CAPTURE(k.name);
    CHECK(k.waits_for_prior_grids);
    std::size_t entries = 0;
    for (std::size_t at = k.source.find("__global__"); at != std::string::npos; at = k.source.find("__global__", at)) {
      const std::size_t body = k.source.find("{\n", at);
      REQUIRE(body != std::string::npos);
      CHECK(k.source.compare(body + 2, first.size(), first) == 0);
      const std::size_t end = k.source.find("\n}\n", body);
      REQUIRE(end != std::string::npos);
      CHECK(k.source.compare(end + 3 - last.size(), last.size(), last) == 0);
      const std::string entry = k.source.substr(body, end + 3 - body);
      CHECK(entry.find("let_dependent") == entry.rfind("let_dependent")); // once, at the end
      at = body;
      ++entries;
    }
    CHECK(entries == k.entries.size());
  }
  // A probe times one instruction alone: no dependency, so it is launched plainly.
  CHECK_FALSE(emit_exp_probe().waits_for_prior_grids);
  CHECK(emit_exp_probe().source.find("griddepcontrol") == std::string::npos);
}

TEST_CASE("every spec field changes the kernel name; equal specs hash equally") {
  std::set<std::string> names;
  std::set<std::size_t> hashes;
  KernelSpec base;
  base.semiring = Semiring::max_plus;
  auto add = [&](const KernelSpec& s) {
    names.insert(emit_kernel(s).name);
    hashes.insert(hash_value(s));
  };
  add(base);
  KernelSpec s = base;
  s.semiring = Semiring::min_plus;
  add(s);
  s = base;
  s.dtype = s.out_dtype = DType::f64;
  add(s);
  s = base;
  s.dtype = DType::f16;
  s.out_dtype = DType::f32;
  add(s);
  s = base;
  s.with_argmax = true;
  add(s);
  s = base;
  s.block_x = 64;
  s.block_y = 4;
  add(s);
  s = base;
  s.index64 = true;
  add(s);
  CHECK(names.size() == 7);
  CHECK(hashes.size() == 7);
  KernelSpec copy = base;
  CHECK(copy == base);
  CHECK(hash_value(copy) == hash_value(base));
}

TEST_CASE("kernel names carry the readable parts") {
  KernelSpec s;
  s.semiring = Semiring::max_times;
  s.dtype = DType::bf16;
  s.out_dtype = DType::f32;
  s.with_argmax = true;
  s.index64 = true;
  CHECK(std::regex_match(emit_kernel(s).name, std::regex("max_times_bf16tof32_linear_b32x8_i64_arg_[0-9a-f]{8}")));
  CHECK(std::regex_match(emit_exp_probe().name, std::regex("probe_exp2_[0-9a-f]{8}")));
}

TEST_CASE("kernel names are lowercase parts joined by one '_', the tile a part of its own") {
  const std::regex parts("[a-z][a-z0-9]*(_[a-z0-9]+)*_[0-9a-f]{8}");
  for (const auto& list : {test::all_variants(), test::grad_variants()})
    for (const KernelSpec& spec : list) {
      const std::string name = emit_kernel(spec).name;
      CAPTURE(name);
      CHECK(std::regex_match(name, parts));
    }
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
    for (Semiring semiring : {Semiring::log, Semiring::max_plus}) {
      ChainProblem p;
      p.semiring = semiring, p.form = form, p.B = 2, p.T = 64, p.C = 256;
      for (const GeneratedKernel& unit : emit_chain_units(clustered_chain_spec(p, 2))) {
        CAPTURE(unit.name);
        CHECK(std::regex_match(unit.name, parts));
      }
    }
  CHECK(std::regex_match(emit_chunk_kernel(Semiring::max_plus, DType::bf16, 33).name, parts));
  KernelSpec tiled;
  tiled.strategy = Strategy::tiled;
  tiled.tile_m = 128, tiled.tile_n = 64, tiled.tile_k = 16, tiled.thread_m = 8, tiled.thread_n = 4;
  tiled.min_blocks = 2;
  CHECK(std::regex_match(emit_kernel(tiled).name, std::regex("log_f32_tiled_128x64x16_t8x4_mb2_[0-9a-f]{8}")));
  tiled.pass = Pass::grad_a;
  CHECK(std::regex_match(emit_kernel(tiled).name, std::regex("log_f32_tiled_grad_a_128x64x16_t8x4_mb2_[0-9a-f]{8}")));
}
