// The chain specs the generator makes (generator/chain_source.hpp): the rule's clusters of blocks per sequence at
// the shapes they were measured on (and the structured distributions' clusters), every default spec valid and within
// its registers, the spec checks naming the field, and the generated text of a clustered module. No GPU needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "expect.hpp"
#include "generator/chain_source.hpp"
#include "generator/distribution_source.hpp"
#include "runtime/chain_stepped.hpp"
#include "templates/chain/expect_params.cuh"
#include "templates/chain/params.cuh"

using namespace jitbmm;
using test::expect_invalid;

namespace {

constexpr int kSms = 132; // an H100's or H200's multiprocessors

ChainProblem chain(Semiring semiring, int64_t B, int64_t C, ChainForm form = ChainForm::crf,
                   DType dtype = DType::f32) {
  ChainProblem p;
  p.semiring = semiring;
  p.dtype = dtype;
  p.form = form;
  p.B = B;
  p.T = 64;
  p.C = C;
  return p;
}

} // namespace

TEST_CASE("chain specs: one block per sequence without clusters to lend (before sm_90, or no device)") {
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (int64_t C : {1, 33, 128, 256, 1024})
      for (int64_t B : {0, 1, 8, 1000}) {
        const ChainSpec spec = default_chain_spec(chain(s, B, C));
        CAPTURE(to_string(spec));
        CHECK(spec.forward.cluster == 1);
        CHECK(spec.saving.cluster == 1);
      }
}

TEST_CASE("chain specs: the rule's clusters at the shapes they were measured on (132 SMs)") {
  struct Expect {
    Semiring semiring;
    int64_t B, C;
    ChainForm form;
    int forward, saving; // saving: log only
  };
  const Expect expect[] = {
      {Semiring::log, 32, 32, ChainForm::crf, 1, 1},        // below 128 states a barrier costs more than it saves
      {Semiring::log, 32, 64, ChainForm::crf, 1, 1},
      {Semiring::log, 8, 128, ChainForm::crf, 8, 8},        // 256 threads: two blocks an SM
      {Semiring::max_plus, 8, 128, ChainForm::crf, 8, 0},
      {Semiring::log, 32, 128, ChainForm::crf, 2, 2},       // clusters of 2 may fill the SMs
      {Semiring::log, 16, 256, ChainForm::crf, 4, 4},       // 8 blocks of 512 threads would not fit at once
      {Semiring::log, 4, 512, ChainForm::crf, 8, 8},
      {Semiring::log, 1000, 256, ChainForm::crf, 1, 1},     // a large batch fills the GPU itself
      {Semiring::log, 8, 128, ChainForm::hmm, 1, 1},        // f32 transitions of 128 states stay in registers
      {Semiring::max_plus, 16, 128, ChainForm::hmm, 4, 0},  // Viterbi splits them while a block has an SM
      {Semiring::max_plus, 64, 128, ChainForm::hmm, 2, 0},
      {Semiring::max_plus, 128, 128, ChainForm::hmm, 1, 0},
      {Semiring::log, 16, 256, ChainForm::hmm, 8, 4},       // beyond, they are read each step
  };
  for (const Expect& e : expect) {
    const ChainSpec spec = default_chain_spec(chain(e.semiring, e.B, e.C, e.form), kSms);
    CAPTURE(to_string(spec));
    CHECK(spec.forward.cluster == e.forward);
    if (e.semiring == Semiring::log) CHECK(spec.saving.cluster == e.saving);
  }
}

TEST_CASE("chain specs: the forward's lanes at the shapes they were measured on (132 SMs)") {
  // Sixteen terms a lane where the HMM form's transitions stay in registers (from 64 states; sixty-four for log from
  // 128 states where the step still fits in them), eight where a step's terms are read (the CRF form) or at 32
  // states; Viterbi measured at each HMM shape below (generator/chain_source.cpp).
  struct Expect {
    Semiring semiring;
    int64_t B, C;
    ChainForm form;
    int lanes;
  };
  const Expect expect[] = {
      {Semiring::max_plus, 16, 64, ChainForm::hmm, 4},   {Semiring::max_plus, 512, 64, ChainForm::hmm, 4},
      {Semiring::max_plus, 128, 128, ChainForm::hmm, 8}, {Semiring::max_plus, 64, 128, ChainForm::hmm, 8},
      {Semiring::max_plus, 4, 128, ChainForm::hmm, 8},   {Semiring::max_plus, 32, 32, ChainForm::hmm, 4},
      {Semiring::log, 32, 128, ChainForm::hmm, 2},       {Semiring::max_plus, 32, 128, ChainForm::crf, 16},
      {Semiring::log, 512, 64, ChainForm::hmm, 4},
  };
  for (const Expect& e : expect) {
    const ChainSpec spec = default_chain_spec(chain(e.semiring, e.B, e.C, e.form), kSms);
    CAPTURE(to_string(spec));
    CHECK(spec.forward.lanes == e.lanes);
  }
}

// The HMM form's log saving forward in f32 runs the forward's loop (its lanes and block), the backward messages with
// lanes of their own, where both keep a step in registers (generator/chain_source.cpp); f64 keeps the older rule.
TEST_CASE("chain specs: the HMM form's saving forward takes the forward's loop (f32 log, one block a sequence)") {
  for (const int64_t C : {64, 100, 128}) {
    const ChainSpec spec = default_chain_spec(chain(Semiring::log, 512, C, ChainForm::hmm), kSms);
    CAPTURE(to_string(spec));
    CHECK(spec.forward.cluster == 1);
    CHECK(spec.saving.threads == spec.forward.threads);
    CHECK(spec.saving.lanes == spec.forward.lanes);
    CHECK(spec.saving.cluster == spec.forward.cluster);
    CHECK(spec.prefetch(spec.saving));
    CHECK(spec.prefetch(spec.beta()));
  }
}

// That loop takes more than half an SM's registers at 128 states: where the saving forward's launch (two blocks a
// sequence) outnumbers the SMs it is compiled for two blocks an SM, so that a sequence's two recursions run at once.
TEST_CASE("chain specs: the HMM form's saving forward for two blocks an SM where its launch outnumbers the SMs") {
  auto blocks = [](int64_t B, int64_t C, int sms = kSms, ChainForm form = ChainForm::hmm, DType dtype = DType::f32) {
    return default_chain_spec(chain(Semiring::log, B, C, form, dtype), sms).saving.blocks;
  };
  CHECK(blocks(256, 128) == 2);
  CHECK(blocks(128, 128) == 2);
  CHECK(blocks(67, 128) == 2);
  CHECK(blocks(66, 128) == 1); // 132 blocks: one an SM holds them all
  CHECK(blocks(8, 128) == 1);
  CHECK(blocks(256, 128, 0) == 1); // no SMs known
  CHECK(blocks(256, 64) == 1);     // its block already leaves room for a second
  CHECK(blocks(256, 129) == 1);    // eight lanes a state: two blocks an SM would spill hundreds of bytes
  CHECK(blocks(256, 256) == 1);    // 512 threads: two would leave 64 registers a thread
  CHECK(blocks(256, 128, kSms, ChainForm::crf) == 1);
  CHECK(blocks(256, 128, kSms, ChainForm::hmm, DType::f64) == 1);
  const ChainProblem p = chain(Semiring::log, 256, 128, ChainForm::hmm);
  const ChainSpec spec = default_chain_spec(p, kSms);
  CAPTURE(to_string(spec));
  CHECK(spec.forward.blocks == 1);
  check_chain_spec(spec, p);
  // A stored decision's spec takes it too, and only the saving forward's unit is built for it.
  CHECK(with_rule_saving_blocks(clustered_chain_spec(p, 1, 1), p.B, kSms) == spec);
  const GeneratedKernel saving = emit_chain_kernel(spec, ChainUnit::saving);
  CHECK(saving.name.find("_m2_") != std::string::npos);
  CHECK(saving.source.find("__launch_bounds__(" + std::to_string(spec.saving.threads) + ", 2) " + saving.name + "(") !=
        std::string::npos);
  CHECK(saving.source.find("saving=" + std::to_string(spec.saving.threads) + "x" + std::to_string(spec.saving.lanes) +
                           "m2") != std::string::npos);
  CHECK(emit_chain_kernel(spec).name.find("_m") == std::string::npos);
  CHECK(emit_chain_kernel(spec, ChainUnit::backward).source ==
        emit_chain_kernel(default_chain_spec(chain(Semiring::log, 8, 128, ChainForm::hmm), kSms), ChainUnit::backward)
            .source);
  ChainSpec bad = spec;
  bad.saving.blocks = 16;
  expect_invalid([&] { check_chain_spec(bad, p); }, "chain spec.saving_blocks");
}

// The CRF form's log saving forward stages its backward messages' steps through shared memory where their groups
// have sixteen lanes or more and two slabs fit the block's shared memory (generator/chain_source.cpp); the HMM form,
// max_plus and fewer lanes read as before. A slab row's pitch lets a warp's groups read 32 banks.
TEST_CASE("chain specs: the backward messages' staged steps, where the rule takes them, and their slabs' size") {
  ChainSpec eight = clustered_chain_spec(chain(Semiring::log, 8, 128), 8);
  CAPTURE(to_string(eight));
  REQUIRE(eight.beta_lanes >= 16);
  CHECK(eight.beta_staged());
  CHECK(eight.saving_dynamic_bytes() == jb::chain_slab_bytes(128, 16, eight.beta_lanes, 4));
  CHECK(emit_chain_kernel(eight, ChainUnit::saving).source.find(", 0, true, false, 8>") != std::string::npos);
  eight.beta_lanes = 8;
  CHECK_FALSE(eight.beta_staged());
  ChainSpec tight = clustered_chain_spec(chain(Semiring::log, 8, 128), 8);
  tight.shared_limit = 16 * 1024; // two slabs of 128 × 34 floats and the kernel's own do not fit
  CHECK_FALSE(tight.beta_staged());
  CHECK(tight.saving_dynamic_bytes() == std::max(tight.dynamic_bytes(tight.saving), tight.dynamic_bytes(tight.beta())));
  CHECK_FALSE(clustered_chain_spec(chain(Semiring::log, 8, 128, ChainForm::hmm), 8).beta_staged());
  CHECK_FALSE(clustered_chain_spec(chain(Semiring::max_plus, 8, 128), 8).beta_staged());
  CHECK_FALSE(default_chain_spec(chain(Semiring::log, 32, 64), kSms).beta_staged()); // eight lanes
  CHECK_FALSE(default_chain_spec(chain(Semiring::log, 4, 512), kSms).beta_staged()); // 266 KiB of slabs
  for (int lanes : {1, 2, 4, 8, 16, 32})
    for (int targets : {1, 5, 16, 17, 64, 128}) {
      const int pitch = jb::chain_slab_pitch(targets, lanes);
      CHECK(pitch >= targets);
      CHECK(pitch < targets + 32);
      CHECK(pitch % 32 == 32 / lanes % 32);
    }
}

// The stepped strategy's fused forms (runtime/chain_stepped.hpp): log and max_plus HMMs with one shared table of at
// least 64 sequences, as measured: log where a step has between 16 tiles of 32 × 64 outputs and one an SM, max_plus
// at 128 states or more between 32 tiles and two an SM; never f64, batched tables or the CRF form.
TEST_CASE("the stepped strategy's fused forms: the rule's shapes (132 SMs), and where they do not apply") {
  struct Expect {
    Semiring semiring;
    int64_t B, C;
    bool fused;
  };
  const Semiring L = Semiring::log, M = Semiring::max_plus;
  const Expect expect[] = {{L, 512, 512, true},  {L, 256, 256, true},   {L, 128, 512, true},   {L, 1024, 256, true},
                           {L, 64, 4096, false}, {L, 512, 1024, false}, {L, 512, 2048, false}, {L, 16, 1024, false},
                           {L, 64, 64, false},   {L, 1, 4096, false},   {L, 32, 2048, false},  {L, 64, 512, true},
                           {L, 64, 448, false},  {L, 256, 128, true},   {L, 128, 192, false},  {M, 512, 512, true},
                           {M, 512, 1024, true}, {M, 64, 4096, true},   {M, 1024, 256, true},  {M, 256, 512, true},
                           {M, 128, 512, true},  {M, 2048, 128, true},  {M, 128, 1024, true},  {M, 32, 2048, false},
                           {M, 64, 128, false},  {M, 4096, 64, false},  {M, 16, 1024, false},  {M, 512, 2048, false}};
  for (const Expect& e : expect) {
    CAPTURE(semiring_info(e.semiring).name);
    CAPTURE(e.B);
    CAPTURE(e.C);
    CHECK(default_fused_steps(chain(e.semiring, e.B, e.C, ChainForm::hmm), kSms) == e.fused);
  }
  ChainProblem wide = chain(Semiring::log, 512, 512, ChainForm::hmm, DType::f64);
  ChainProblem batched = chain(Semiring::max_plus, 512, 512, ChainForm::hmm);
  batched.batched_transitions = true;
  for (const ChainProblem& p : {wide, batched, chain(Semiring::log, 512, 512), chain(Semiring::max_plus, 512, 512),
                                chain(Semiring::plus_times, 512, 512, ChainForm::hmm)})
    CHECK_FALSE(fused_steps_apply(p));
  CHECK(fused_steps_apply(chain(Semiring::log, 512, 512, ChainForm::hmm, DType::bf16)));
  CHECK(fused_steps_apply(chain(Semiring::max_plus, 512, 512, ChainForm::hmm, DType::f16)));
}

TEST_CASE("chain specs: every default spec passes its check and keeps its loops within their registers") {
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
    for (Semiring s : {Semiring::log, Semiring::max_plus})
      for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16})
        for (int64_t C : {1, 2, 31, 64, 128, 129, 256, 257, 512, 1000, 1024})
          for (int64_t B : {1, 3, 16, 64, 128})
            for (int sms : {0, kSms}) {
              const ChainProblem p = chain(s, B, C, form, d);
              const ChainSpec spec = default_chain_spec(p, sms);
              CAPTURE(to_string(spec));
              CHECK_NOTHROW(check_chain_spec(spec, p));
              // A cluster the rule takes keeps its blocks' registers; one block per sequence is the fallback
              // whatever its registers (the nvrtc suite checks that those do not spill).
              for (int cluster : {spec.forward.cluster, spec.saving.cluster})
                if (cluster > 1) CHECK(clustered_chain_spec(p, cluster).registers_fit());
            }
}

TEST_CASE("chain spec checks: a cluster size that is not a power of two at most 8 is named") {
  const ChainProblem p = chain(Semiring::log, 2, 64);
  ChainSpec spec = default_chain_spec(p, kSms);
  spec.forward.cluster = 3;
  expect_invalid([&] { check_chain_spec(spec, p); }, "chain spec.cluster: must be a power of two at most 8 (got 3)");
  spec = default_chain_spec(p, kSms);
  spec.saving.cluster = 16;
  expect_invalid([&] { check_chain_spec(spec, p); }, "chain spec.saving_cluster: must be a power of two at most 8");
  expect_invalid([&] { clustered_chain_spec(p, 0); }, "chain spec.cluster: must be a power of two at most 8 (got 0)");
  CHECK(clustered_chain_spec(p, 4).forward.cluster == 4);
  CHECK(clustered_chain_spec(p, 4).beta().cluster == 4);
}

TEST_CASE("chain units: a clustered loop's entry declares its cluster, and its name and spec line say it") {
  const ChainSpec spec = clustered_chain_spec(chain(Semiring::log, 2, 128), 4);
  const GeneratedKernel k = emit_chain_kernel(spec);
  CHECK(k.name.find("_k4_") != std::string::npos);
  CHECK(k.source.find("forward=" + std::to_string(spec.forward.threads) + "x" + std::to_string(spec.forward.lanes) +
                      "x4") != std::string::npos);
  CHECK(k.source.find("__cluster_dims__(4, 1, 1) __launch_bounds__(" + std::to_string(spec.forward.threads)) !=
        std::string::npos);
  const GeneratedKernel s = emit_chain_kernel(spec, ChainUnit::saving);
  CHECK(s.name.find("_saving_s" + std::to_string(spec.saving.threads) + "x") != std::string::npos);
  CHECK(s.name.find("x4_") != std::string::npos);
  const std::string saving = "__cluster_dims__(4, 1, 1) __launch_bounds__(" + std::to_string(spec.saving.threads) +
                             ", 1) " + s.name + "(";
  CHECK(s.source.find(saving) != std::string::npos);
  const GeneratedKernel single = emit_chain_kernel(clustered_chain_spec(chain(Semiring::log, 2, 128), 1));
  CHECK(single.source.find("__cluster_dims__") == std::string::npos);
  CHECK(single.name.find("_k") == std::string::npos);
}

TEST_CASE("chain units: each unit's text depends on its own fields, so specs that differ elsewhere share it") {
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm}) {
    const ChainProblem p = chain(Semiring::log, 2, 128, form);
    const ChainSpec one = clustered_chain_spec(p, 1, 1), forward_apart = clustered_chain_spec(p, 2, 1),
                    saving_apart = clustered_chain_spec(p, 1, 2);
    CHECK(emit_chain_kernel(one).name != emit_chain_kernel(forward_apart).name);
    CHECK(emit_chain_kernel(one, ChainUnit::saving).name == emit_chain_kernel(forward_apart, ChainUnit::saving).name);
    CHECK(emit_chain_kernel(one).source == emit_chain_kernel(saving_apart).source);
    CHECK(emit_chain_kernel(one, ChainUnit::saving).name != emit_chain_kernel(saving_apart, ChainUnit::saving).name);
    CHECK(emit_chain_kernel(one, ChainUnit::backward).source ==
          emit_chain_kernel(saving_apart, ChainUnit::backward).source);
    // Each unit inlines only what it runs.
    const GeneratedKernel backward = emit_chain_kernel(one, ChainUnit::backward);
    CHECK(backward.source.find("chain_forward") == std::string::npos);
    CHECK(emit_chain_kernel(one).source.find(form == ChainForm::hmm ? "hmm_nodes" : "chain_marginals") ==
          std::string::npos);
    const std::vector<std::string> entries = form == ChainForm::hmm
                                                 ? std::vector<std::string>{"", "_edges", "_edges_wide", "_edges_mma",
                                                                            "_reduce"}
                                                 : std::vector<std::string>{""};
    CHECK(backward.entries == entries);
  }
  // The HMM log backward's wide blocks: with an f32 accumulator from 64 to 256 states in multiples of 32; its mma
  // blocks from 128; max_plus sums no factors.
  for (const int64_t C : {16, 32, 64, 96, 127, 128, 160, 256, 257, 288})
    for (const DType d : {DType::f32, DType::bf16, DType::f64})
      for (const Semiring s : {Semiring::log, Semiring::max_plus}) {
        const GeneratedKernel unit =
            emit_chain_kernel(default_chain_spec(chain(s, 2, C, ChainForm::hmm, d)), ChainUnit::backward);
        const bool f32_sums = s == Semiring::log && d != DType::f64 && C <= 256 && C % 32 == 0;
        CHECK(std::count(unit.entries.begin(), unit.entries.end(), "_edges_wide") == int(f32_sums && C >= 64));
        CHECK(std::count(unit.entries.begin(), unit.entries.end(), "_edges_mma") == int(f32_sums && C >= 128));
      }
  // max_plus: the forward (with the path, where asked) and the backward; no saving forward.
  const ChainSpec best = default_chain_spec(chain(Semiring::max_plus, 2, 64));
  CHECK(emit_chain_units(best).size() == 2);
  expect_invalid([&] { emit_chain_kernel(best, ChainUnit::saving); }, "chain unit: max_plus has no saving forward");
}

TEST_CASE("chain modules: half inputs are read as their storage type, reduced in f32, and never through the ring") {
  for (DType d : {DType::f16, DType::bf16})
    for (ChainForm form : {ChainForm::crf, ChainForm::hmm}) {
      const ChainSpec spec = default_chain_spec(chain(Semiring::log, 4, 1024, form, d), kSms);
      CAPTURE(to_string(spec));
      CHECK_FALSE(spec.prefetch(spec.saving)); // at 1024 states the terms do not stay in registers,
      CHECK(spec.stages(spec.saving) == 0);    // and cp.async cannot copy 2 bytes
      CHECK(spec.stages(spec.forward) == 0);
      const GeneratedKernel k = emit_chain_kernel(spec);
      const std::string storage = std::string(dtype_info(d).device_type) + ", jb::ChainLog<float>";
      CHECK(k.source.find("chain_forward<" + storage) != std::string::npos);
      CHECK(emit_chain_kernel(spec, ChainUnit::saving).source.find("chain_saving<" + storage) != std::string::npos);
      CHECK(k.name.find(std::string("_") + dtype_info(d).name + "_") != std::string::npos);
    }
}

TEST_CASE("the distributions' clusters: from 128 states, doubling while the launch's clusters fit (132 SMs)") {
  CHECK(distribution_cluster(8, 128, kSms) == 8);   // 64 blocks
  CHECK(distribution_cluster(16, 128, kSms) == 4);  // 64 blocks; 8 would not fit at once
  CHECK(distribution_cluster(32, 128, kSms) == 2);  // 64 blocks
  CHECK(distribution_cluster(1, 1024, kSms) == 8);
  CHECK(distribution_cluster(100, 128, kSms) == 1); // 200 blocks would not fit
  CHECK(distribution_cluster(8, 64, kSms) == 1);    // below 128 states the cluster's barrier costs more than it saves
  CHECK(distribution_cluster(8, 128, 0) == 1);      // no clusters to lend
  CHECK(distribution_cluster(0, 128, kSms) == 1);   // no launch
  const GeneratedKernel k = emit_expect_kernel(DType::f32, 128, 8);
  CHECK(k.name.rfind("chain_expect_f32_c128_k8", 0) == 0);
  CHECK(k.source.find("__cluster_dims__(8, 1, 1)") != std::string::npos);
  CHECK(emit_expect_kernel(DType::f32, 128).source.find("__cluster_dims__") == std::string::npos);
  const GeneratedKernel kb = emit_kbest_kernel(DType::f32, 128, 4, 8);
  CHECK(kb.name.rfind("chain_kbest_f32_c128_k4_cl8", 0) == 0);
  CHECK(kb.source.find("__cluster_dims__(8, 1, 1)") != std::string::npos);
}

// The HMM form's expectations sum a transition table's gradients in 32 × 32 tiles over parts of the steps: about
// eight blocks an SM in all, but never a part of fewer steps than a staged batch (or of none); the shared table's
// partial sums are 2 × parts × C² values. The transitions' entry's launch bounds keep two blocks an SM of 4-byte
// sums, one of 8-byte ones.
TEST_CASE("the HMM expectations' transitions: tiles, parts of whole batches of steps, and their launch bounds") {
  CHECK(jb::expect_tiles(1) == 1);
  CHECK(jb::expect_tiles(32) == 1);
  CHECK(jb::expect_tiles(33) == 4);
  CHECK(jb::expect_tiles(256) == 64);
  CHECK(jb::expect_tiles(1024) == 1024);
  CHECK(jb::expect_parts(256, 512 * 31, kSms) == 17); // 64 tiles: 1,088 blocks of 933 or 934 steps
  CHECK(jb::expect_parts(16, 512 * 31, kSms) == 992); // 1 tile: eight blocks an SM would be parts of 15 steps
  CHECK(jb::expect_parts(16, 16 * 3, kSms) == 3);
  CHECK(jb::expect_parts(16, 5, kSms) == 1); // fewer steps than a batch: one part
  CHECK(jb::expect_parts(16, 0, kSms) == 1); // no steps (T = 1, or B = 0)
  CHECK(jb::expect_parts(1024, 1 << 20, kSms) == 2);
  for (const long long steps : {1LL, 15LL, 16LL, 17LL, 1000LL, 123457LL})
    for (const int states : {1, 31, 64, 129, 1024}) {
      const long long parts = jb::expect_parts(states, steps, kSms);
      CHECK(parts >= 1);
      CHECK((parts == 1 || steps / parts >= jb::kExpectTileSteps));
    }
  CHECK(jb::expect_factor_bound(4) == 40);
  CHECK(jb::expect_factor_bound(8) == 300);
  const std::string two = "__launch_bounds__(256, 2)";
  CHECK(emit_expect_kernel(DType::f32, 256, 1, 0, true).source.find(two) != std::string::npos);
  CHECK(emit_expect_kernel(DType::f64, 256, 1, 0, true).source.find(two) == std::string::npos);
}
