// The HMM form's sums over the steps (runtime/hmm_sums.hpp) on a device of an H100's multiprocessors and shared
// memory, at the shapes their ranges and blocks were measured on: one wave, a block on every SM where the partial
// sums' room allows, the wide blocks where a whole wave of them fits, and the stepped strategy taking the sums where
// they were faster than its product. No GPU needed: nothing is built for the sizes.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include "jitbmm/chain.hpp"
#include "runtime/hmm_sums.hpp"

using namespace jitbmm;

namespace {

std::shared_ptr<const DeviceInfo> h100() {
  auto d = std::make_shared<DeviceInfo>();
  d->cc_major = 9;
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
int64_t ranges(const ChainProblem& p) {
  return int64_t(HmmSums(p, h100(), nullptr).workspace_bytes(true)) / (p.C * p.C * 4);
}

} // namespace

TEST_CASE("hmm sums: a wave of narrow blocks, every SM one where the partial sums' room is short") {
  // Half the tables' bytes leave 10 ranges of 8 tiles at 80 × 32 × 128; what the peak leaves allows 16, a block on
  // each of 128 SMs.
  CHECK(ranges(hmm(80, 32, 128)) == 16);
  CHECK(ranges(hmm(128, 32, 128)) == 16);
  CHECK(ranges(hmm(256, 32, 128)) == 32);  // half the tables' bytes: two blocks an SM
  CHECK(ranges(hmm(512, 32, 64)) == 128);  // two tiles
  CHECK(ranges(hmm(1024, 32, 64)) == 198); // a whole wave of three blocks an SM
  CHECK(ranges(hmm(2048, 32, 32)) == 784); // six blocks an SM, 81 steps each
  for (const ChainProblem& p : {hmm(80, 32, 128), hmm(1024, 32, 64), hmm(2048, 32, 32), hmm(4096, 32, 16)})
    CHECK_FALSE(HmmSums(p, h100(), nullptr).wide());
}

TEST_CASE("hmm sums: the wide blocks where a whole wave fits, f32 accumulators from 64 to 256 states") {
  CHECK(HmmSums(hmm(4096, 32, 64), h100(), nullptr).wide());
  CHECK(ranges(hmm(4096, 32, 64)) == 527); // four blocks of 128 threads an SM, 241 steps each
  CHECK(HmmSums(hmm(2048, 32, 128), h100(), nullptr).wide());
  CHECK(ranges(hmm(2048, 32, 128)) == 132); // one block of 512 threads an SM
  CHECK(HmmSums(hmm(1024, 32, 128), h100(), nullptr).wide());
  CHECK_FALSE(HmmSums(hmm(512, 32, 128), h100(), nullptr).wide()); // 126 ranges fit: not a whole wave
  CHECK_FALSE(HmmSums(hmm(4096, 32, 64, DType::f64), h100(), nullptr).wide());
  CHECK_FALSE(HmmSums(hmm(8192, 32, 32), h100(), nullptr).wide());
  CHECK_FALSE(HmmSums(hmm(512, 32, 512), h100(), nullptr).wide());
}

TEST_CASE("hmm sums: the stepped strategy's log backward takes them up to 64 states, and to 128 in wide blocks") {
  CHECK(hmm_sums_apply(hmm(4096, 32, 64), h100()));
  CHECK(hmm_sums_apply(hmm(64, 32, 16), h100()));
  CHECK(hmm_sums_apply(hmm(2048, 32, 128), h100()));
  CHECK_FALSE(hmm_sums_apply(hmm(512, 32, 128), h100()));
  CHECK_FALSE(hmm_sums_apply(hmm(512, 32, 256), h100()));
  ChainProblem viterbi = hmm(4096, 32, 64);
  viterbi.semiring = Semiring::max_plus;
  CHECK_FALSE(hmm_sums_apply(viterbi, h100()));
  ChainProblem crf = hmm(4096, 32, 64);
  crf.form = ChainForm::crf;
  CHECK_FALSE(hmm_sums_apply(crf, h100()));
}
