// The HMM form's sums over the steps (runtime/hmm_sums.hpp) on a device of an H100's multiprocessors and shared
// memory, at the shapes their ranges and blocks were measured on: one wave, a block on every SM where the partial
// sums' room allows, the wide blocks where a whole wave of them fits, the mma blocks where the device has TF32 mma.sync
// and they were measured faster, and the stepped strategy taking the sums where they were faster than its product. No
// GPU needed: nothing is built for the sizes.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include "jitbmm/chain.hpp"
#include "runtime/hmm_sums.hpp"
#include "templates/chain/edge_params.cuh"

using namespace jitbmm;

namespace {

// An H100, or one at the sm_75 feature level (without TF32 mma.sync: the narrow and wide blocks).
std::shared_ptr<const DeviceInfo> h100(bool mma = false) {
  auto d = std::make_shared<DeviceInfo>();
  d->cc_major = 9;
  d->features = mma ? arch_features(90) : capped_features(90, 75);
  d->sm_count = 132;
  d->max_shared_per_sm = 233472;
  d->max_shared_per_block_optin = 232448;
  return d;
}

ChainProblem hmm(int64_t B, int64_t T, int64_t C, DType dtype = DType::f32) {
  ChainProblem p;
  p.form = ChainForm::hmm;
  p.dtype = dtype;
  p.B = B;
  p.T = T;
  p.C = C;
  return p;
}

// The ranges of steps a backward sums in (its scratch is their partial sums, C² values each).
int64_t ranges(const ChainProblem& p, bool mma = false) {
  return int64_t(HmmSums(p, h100(mma), nullptr).workspace_bytes(true)) / (p.C * p.C * 4);
}

int kind(const ChainProblem& p, bool mma = false) { return HmmSums(p, h100(mma), nullptr).kind(); }

} // namespace

TEST_CASE("hmm sums: without TF32 mma.sync, a wave of narrow blocks, every SM one where the sums' room is short") {
  // Half the tables' bytes leave 10 ranges of 8 tiles at 80 × 32 × 128; what the peak leaves allows 16, a block on
  // each of 128 SMs.
  CHECK(ranges(hmm(80, 32, 128)) == 16);
  CHECK(ranges(hmm(128, 32, 128)) == 16);
  CHECK(ranges(hmm(256, 32, 128)) == 32);  // half the tables' bytes: two blocks an SM
  CHECK(ranges(hmm(512, 32, 64)) == 128);  // two tiles
  CHECK(ranges(hmm(1024, 32, 64)) == 198); // a whole wave of three blocks an SM
  CHECK(ranges(hmm(2048, 32, 32)) == 784); // six blocks an SM, 81 steps each
  for (const ChainProblem& p : {hmm(80, 32, 128), hmm(1024, 32, 64), hmm(2048, 32, 32), hmm(4096, 32, 16)})
    CHECK(kind(p) == jb::kEdgeNarrow);
}

TEST_CASE("hmm sums: without TF32 mma.sync, the wide blocks where a whole wave fits, f32 sums from 64 to 256 states") {
  CHECK(kind(hmm(4096, 32, 64)) == jb::kEdgeWide);
  CHECK(ranges(hmm(4096, 32, 64)) == 527); // four blocks of 128 threads an SM, 241 steps each
  CHECK(kind(hmm(2048, 32, 128)) == jb::kEdgeWide);
  CHECK(ranges(hmm(2048, 32, 128)) == 132); // one block of 512 threads an SM
  CHECK(kind(hmm(1024, 32, 128)) == jb::kEdgeWide);
  CHECK(kind(hmm(512, 32, 128)) == jb::kEdgeNarrow); // 126 ranges fit: not a whole wave
  CHECK(kind(hmm(4096, 32, 64, DType::f64)) == jb::kEdgeNarrow);
  CHECK(kind(hmm(8192, 32, 32)) == jb::kEdgeNarrow);
  CHECK(kind(hmm(512, 32, 512)) == jb::kEdgeNarrow);
}

TEST_CASE("hmm sums: with TF32 mma.sync, the mma blocks where the wide blocks' wave is whole from 128 states, and at "
          "256 where they fill the SMs") {
  CHECK(kind(hmm(2048, 32, 128), true) == jb::kEdgeMma);
  CHECK(ranges(hmm(2048, 32, 128), true) == 132); // two tiles of 64 rows, two blocks of 256 threads an SM
  CHECK(kind(hmm(1024, 32, 128), true) == jb::kEdgeMma);
  CHECK(kind(hmm(4096, 32, 128, DType::f16), true) == jb::kEdgeMma); // half tables sum in f32
  CHECK(kind(hmm(16, 256, 256), true) == jb::kEdgeMma);
  CHECK(ranges(hmm(16, 256, 256), true) == 18); // eight tiles of 32 rows: what the peak leaves
  // Below 128 states, and at 128 without a whole wave of wide blocks, the others stay.
  CHECK(kind(hmm(4096, 32, 64), true) == jb::kEdgeWide);
  CHECK(kind(hmm(4096, 32, 96), true) == jb::kEdgeWide);
  CHECK(kind(hmm(512, 32, 128), true) == jb::kEdgeNarrow);
  CHECK(kind(hmm(80, 32, 128), true) == jb::kEdgeNarrow);
  CHECK(kind(hmm(4096, 32, 64, DType::f64), true) == jb::kEdgeNarrow);
  CHECK(kind(hmm(512, 32, 100), true) == jb::kEdgeNarrow); // no mma blocks off multiples of 32
  ChainProblem viterbi = hmm(4096, 32, 128);
  viterbi.semiring = Semiring::max_plus;
  CHECK(kind(viterbi, true) == jb::kEdgeNarrow);
}

TEST_CASE("hmm sums: the stepped strategy's log backward takes them up to 64 states, to 128 in a wave of wide blocks") {
  CHECK(hmm_sums_apply(hmm(4096, 32, 64), h100()));
  CHECK(hmm_sums_apply(hmm(64, 32, 16), h100()));
  CHECK(hmm_sums_apply(hmm(2048, 32, 128), h100()));
  CHECK_FALSE(hmm_sums_apply(hmm(512, 32, 128), h100()));
  CHECK_FALSE(hmm_sums_apply(hmm(512, 32, 256), h100()));
  // With TF32 mma.sync the same shapes: the mma blocks run where the wide ones would.
  CHECK(hmm_sums_apply(hmm(2048, 32, 128), h100(true)));
  CHECK_FALSE(hmm_sums_apply(hmm(512, 32, 128), h100(true)));
  CHECK_FALSE(hmm_sums_apply(hmm(512, 32, 256), h100(true)));
  ChainProblem viterbi = hmm(4096, 32, 64);
  viterbi.semiring = Semiring::max_plus;
  CHECK_FALSE(hmm_sums_apply(viterbi, h100()));
  ChainProblem crf = hmm(4096, 32, 64);
  crf.form = ChainForm::crf;
  CHECK_FALSE(hmm_sums_apply(crf, h100()));
}
