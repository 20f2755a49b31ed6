// Decisions brought from elsewhere: a decisions file's codec (tune --export / --import), importing into a cache, the
// decisions shipped with jitbmm, and the cascade that reads the user's decisions before the shipped ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "jitbmm/version.hpp"
#include "expect.hpp"
#include "process_state.hpp"
#include "runtime/autotune.hpp"
#include "runtime/tuner/decisions_file.hpp"
#include "runtime/tuner/shipped_decisions.hpp"
#include "temp_dir.hpp"

using namespace jitbmm;
namespace fs = std::filesystem;

namespace {

const TuningDevice kDevice{"Fake H200", "sm_90", "13.0", 132, 13000};

Problem sample() {
  Problem p;
  p.shape = {8, 512, 256, 512};
  return p;
}

Decision decision_for(const Problem& p, const KernelSpec& spec, bool bucket) {
  Decision d;
  d.spec = spec;
  d.problem = describe(p);
  d.family = tuning_family(p, kDevice);
  d.bucket = bucket;
  d.shape = bucket ? shape_bucket(p.shape) : p.shape;
  return d;
}

DecisionEntry entry_for(const Problem& p, const Decision& d) {
  return {tuning_key(p, kDevice, d.bucket), "tune", encode_decision(d)};
}

DecisionEntry chain_entry(const std::string& key) {
  ChainDecision c;
  c.problem = "log f32 crf C=64 B<=32 T<=512 contiguous";
  c.timed = {{1, 0.5, 0.6, 0.7}};
  return {key, "chaintune", encode_chain_decision(c)};
}

Choice decide(DiskCache* disk, const DecisionSet* shipped, const Problem& p) {
  if (auto c = stored_choice(disk, p, kDevice, TunePolicy::never, Pass::forward, {}, InputRange::normal, shipped))
    return *c;
  return {default_spec(p), "default", {}};
}

} // namespace

TEST_CASE("a decisions file keeps every entry as it was, and its reader refuses any defect, naming the line") {
  const Problem p = sample();
  const std::vector<DecisionEntry> entries = {entry_for(p, decision_for(p, default_spec(p, Strategy::tiled), false)),
                                              entry_for(p, decision_for(p, default_spec(p, Strategy::linear), true)),
                                              chain_entry(std::string(64, 'c'))};
  const std::string text = encode_decisions_file(entries, "two lines\nof comment");
  const std::vector<DecisionEntry> back = decode_decisions_file(text, "x.txt");
  REQUIRE(back.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(back[i].key == entries[i].key);
    CHECK(back[i].kind == entries[i].kind);
    CHECK(back[i].text == entries[i].text);
  }
  CHECK(decision_set(back).products.size() == 2);
  CHECK(decision_set(back).chains.size() == 1);
  CHECK(decode_decisions_file("jitbmm-decisions 1\n", "empty.txt").empty());
  // The same file saved with Windows line ends reads the same.
  std::string crlf;
  for (const char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  const std::vector<DecisionEntry> from_crlf = decode_decisions_file(crlf, "crlf.txt");
  REQUIRE(from_crlf.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(from_crlf[i].text == entries[i].text);

  const auto refused = [](const std::string& bad, const std::string& why) {
    CAPTURE(bad);
    test::expect_invalid([&] { decode_decisions_file(bad, "x.txt"); }, why);
    test::expect_invalid([&] { decode_decisions_file(bad, "x.txt"); }, "x.txt: line ");
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.substr(0, at) + to + text.substr(at + from.size());
  };
  refused("", "not a jitbmm decisions file");
  refused("jitbmm-decisions 2\n", "not a jitbmm decisions file");
  refused(text.substr(0, text.size() - 1), "cut short");
  refused(text.substr(0, text.size() - 20), "cut short");
  const std::string first = "entry tune " + entries[0].key + ' ';
  refused(replaced(first, "entry cubin " + entries[0].key + ' '), "unknown kind 'cubin'");
  refused(replaced(first, "entry tune " + std::string(63, 'a') + "X "), "64 hexadecimal digits");
  refused(replaced("entry tune " + entries[1].key, "entry tune " + entries[0].key), "appears twice");
  const std::string lines = std::to_string(std::count(entries[0].text.begin(), entries[0].text.end(), '\n'));
  const std::string fewer = std::to_string(std::stoi(lines) - 1);
  refused(replaced(first + lines, first + fewer), "does not decode as a product decision"); // a line left out
  refused(replaced("scope exact", "scope neither"), "does not decode as a product decision");
  refused(replaced("scope exact", "scope bucket"), "not what its key stands for");
  refused(replaced(first, "entry chaintune " + entries[0].key + ' '), "does not decode as a chain decision");
  refused(text + "# a comment after the entries\n", "expected 'entry KIND KEY LINES'");
}

TEST_CASE("a decision from the trusted shared cache is marked as brought in (so checked on first use); one of the "
          "user's own cache is not") {
  TempDir shared("jitbmm-shared-test"), mine("jitbmm-mine-test");
  const Problem p = sample();
  const Decision theirs = decision_for(p, default_spec(p, Strategy::linear), true);
  {
    DiskCache filling(shared.path); // as the cluster's admins fill it, on another machine
    REQUIRE(filling.put(entry_for(p, theirs).key, "tune", encode_decision(theirs)));
  }
  REQUIRE(std::filesystem::exists(shared.path));
  DiskCache disk(mine.path);
  disk.set_fallback(std::make_unique<DiskCache>(shared.path, 0, CacheAccess::trusted_read_only));
  const auto from_shared = load_decision(&disk, entry_for(p, theirs).key);
  REQUIRE(from_shared);
  CHECK(from_shared->spec == theirs.spec);
  CHECK(from_shared->origin == "the shared cache " + shared.path);
  const Decision own = decision_for(p, default_spec(p, Strategy::tiled), false);
  REQUIRE(disk.put(entry_for(p, own).key, "tune", encode_decision(own)));
  const auto from_mine = load_decision(&disk, entry_for(p, own).key);
  REQUIRE(from_mine);
  CHECK(from_mine->origin.empty());
}

TEST_CASE("an import stores what the cache lacks, marked as imported, and keeps what it has") {
  TempDir dir("jitbmm-import-test");
  DiskCache disk(dir.path);
  const Problem p = sample();
  const Decision own = decision_for(p, default_spec(p, Strategy::tiled), false);
  REQUIRE(disk.put(entry_for(p, own).key, "tune", encode_decision(own)));
  const Decision brought = decision_for(p, default_spec(p, Strategy::linear), true);
  const std::vector<DecisionEntry> entries = {entry_for(p, decision_for(p, default_spec(p, Strategy::linear), false)),
                                              entry_for(p, brought), chain_entry(std::string(64, 'c'))};
  const ImportReport report = import_decisions(disk, entries, "site.txt");
  CHECK(report.stored == 2);
  CHECK(report.kept == 1);
  // The user's own exact decision is untouched; the bucket decision came in, marked.
  const auto exact = load_decision(&disk, entry_for(p, own).key);
  REQUIRE(exact);
  CHECK(exact->spec == own.spec);
  CHECK(exact->origin.empty());
  const auto bucket = load_decision(&disk, entry_for(p, brought).key);
  REQUIRE(bucket);
  CHECK(bucket->origin == "imported from site.txt");
  CHECK(bucket->spec == brought.spec);
  // What an export writes: every decision of the cache, the imported one with its mark.
  const std::vector<DecisionEntry> all = cache_decisions(disk);
  CHECK(all.size() == 3);
  CHECK(decode_decisions_file(encode_decisions_file(all, ""), "export").size() == 3);
}

TEST_CASE("the shipped decisions decode, and each file was tuned for this version of jitbmm") {
  const std::vector<ShippedFile>& files = shipped_files();
  for (const ShippedFile& f : files) {
    CAPTURE(f.name);
    const std::string text = f.text;
    CHECK_NOTHROW(decode_decisions_file(text, f.name));
    // scripts/tune-shipped writes "jitbmm <version>:" in the comment; the keys hold the version too, so a file of
    // another version would match no problem: tune again with scripts/tune-shipped on that GPU, or remove it.
    CHECK_MESSAGE(text.find(std::string("jitbmm ") + kVersion + ":") != std::string::npos,
                  "tuning/shipped/" << f.name << " was not tuned for jitbmm " << kVersion);
  }
  test::ScopedEnv on("JITBMM_SHIPPED_DECISIONS", "On");
  std::size_t products = 0;
  for (const ShippedFile& f : files)
    for (const DecisionEntry& e : decode_decisions_file(f.text, f.name)) products += e.kind == "tune";
  CHECK(shipped_decisions().products.size() == products);
  test::ScopedEnv off("JITBMM_SHIPPED_DECISIONS", "OFF");
  CHECK(shipped_decisions().empty());
  test::ScopedEnv bad("JITBMM_SHIPPED_DECISIONS", "maybe");
  test::expect_invalid([] { shipped_decisions(); }, "JITBMM_SHIPPED_DECISIONS");
}

TEST_CASE("the cascade takes the user's decisions, then the shipped ones, each exact, bucket, then nearest") {
  TempDir dir("jitbmm-shipped-test");
  DiskCache disk(dir.path);
  const Problem p = sample();
  const KernelSpec shipped_spec = default_spec(p, Strategy::tiled), user_spec = default_spec(p, Strategy::linear);
  const DecisionSet shipped = decision_set({entry_for(p, decision_for(p, shipped_spec, false))});
  CHECK(decide(&disk, nullptr, p).source == "default");
  const Choice from_shipped = decide(&disk, &shipped, p);
  CHECK(from_shipped.source == "shipped exact");
  CHECK(from_shipped.spec == shipped_spec);
  CHECK(from_shipped.stored);
  CHECK(decide(nullptr, &shipped, p).source == "shipped exact"); // without a disk cache too
  // The user's own decision wins, even a bucket's over the shipped exact one.
  const Decision own = decision_for(p, user_spec, true);
  REQUIRE(disk.put(entry_for(p, own).key, "tune", encode_decision(own)));
  CHECK(decide(&disk, &shipped, p).source == "bucket");
  CHECK(decide(&disk, &shipped, p).spec == user_spec);
  // A shape near a shipped bucket takes it; one far from every shipped bucket does not.
  Problem near = p;
  near.shape = {8, 1000, 256, 512};
  Problem far = p;
  far.shape = {8, 4096, 4096, 4096};
  const DecisionSet buckets = decision_set({entry_for(p, decision_for(p, shipped_spec, true))});
  CHECK(decide(nullptr, &buckets, near).source == "shipped nearest bucket");
  CHECK(decide(nullptr, &buckets, far).source == "default");
}

TEST_CASE("a stored decision that does not stand for its key is not used, and a damaged one warns once") {
  TempDir dir("jitbmm-key-test");
  const Problem p = sample();
  Problem other = p;
  other.shape = {8, 2048, 256, 512};
  // Under p's exact key: a decision tuned for another shape, for another family, or for a bucket.
  const std::string key = tuning_key(p, kDevice, false);
  Decision wrong_shape = decision_for(other, default_spec(p, Strategy::tiled), false);
  Problem f64 = p;
  f64.dtype = DType::f64;
  Decision wrong_family = decision_for(p, default_spec(p, Strategy::tiled), false);
  wrong_family.family = tuning_family(f64, kDevice);
  Decision wrong_scope = decision_for(p, default_spec(p, Strategy::tiled), true);
  wrong_scope.shape = p.shape;
  for (const Decision& d : {wrong_shape, wrong_family, wrong_scope}) {
    DiskCache fresh(dir.path); // the cache warns once about damaged entries
    REQUIRE(fresh.put(key, "tune", encode_decision(d)));
    test::CapturedStderr err;
    CHECK(decide(&fresh, nullptr, p).source == "default");
    CHECK(err.warnings() == 1);
    CHECK(err.text().find("not what its key stands for") != std::string::npos);
    CHECK(fs::exists(dir.path + "/" + key + ".tune.bad"));
    fs::remove(dir.path + "/" + key + ".tune.bad");
  }
  // A decisions file holding one is refused whole.
  test::expect_invalid(
      [&] { decode_decisions_file(encode_decisions_file({{key, "tune", encode_decision(wrong_shape)}}, ""), "f"); },
      "not what its key stands for");

  // A decision that does not parse: one warning (the cache's, naming the file it moved aside), not two.
  Problem q = p;
  q.shape = {8, 512, 256, 640};
  const std::string damaged = tuning_key(q, kDevice, false);
  DiskCache fresh(dir.path);
  REQUIRE(fresh.put(damaged, "tune", "spec strategy=magic\n"));
  test::CapturedStderr err;
  CHECK(decide(&fresh, nullptr, q).source == "default");
  CHECK(err.warnings() == 1);
  CHECK(fs::exists(dir.path + "/" + damaged + ".tune.bad"));
}
