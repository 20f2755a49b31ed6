// The chunked strategy's host side (runtime/chain_chunked.hpp): which problems a plan computes in chunks and in how
// many steps, which chunks a problem can take (their products must fit in saved), and its generated module. No
// GPU needed.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "generator/chain_source.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"

using namespace jitbmm;

namespace {

ChainProblem chain(int64_t B, int64_t T, int64_t C, DType dtype = DType::f32) {
  ChainProblem p;
  p.dtype = dtype;
  p.B = B;
  p.T = T;
  p.C = C;
  return p;
}

} // namespace

TEST_CASE("chunked chains: the plan takes chunks for a few sequences of a long chain of 32 to 64 states") {
  CHECK(default_chain_chunk(chain(1, 4096, 64)) == 64);
  CHECK(default_chain_chunk(chain(2, 4096, 64)) == 64);
  CHECK(default_chain_chunk(chain(4, 4096, 32)) == 64);
  CHECK(default_chain_chunk(chain(1, 1024, 32, DType::bf16)) == 64); // half inputs: the tree in f32
  CHECK(default_chain_chunk(chain(1, 4096, 33)) == 64);
  // More sequences, more states, shorter chains, no sequence: the sequential kernels were faster or equal.
  CHECK(default_chain_chunk(chain(4, 4096, 64)) == 0);
  CHECK(default_chain_chunk(chain(1, 4096, 128)) == 0);
  CHECK(default_chain_chunk(chain(1, 4096, 16)) == 0);
  CHECK(default_chain_chunk(chain(1, 1000, 64)) == 0);
  CHECK(default_chain_chunk(chain(0, 4096, 64)) == 0);
  CHECK(default_chain_chunk(chain(1, 4096, 64, DType::f64)) == 0);
  ChainProblem hmm = chain(1, 4096, 64);
  hmm.form = ChainForm::hmm; // the HMM form: from 4096 positions
  CHECK(default_chain_chunk(hmm) == 64);
  hmm.T = 2048;
  CHECK(default_chain_chunk(hmm) == 0);
  hmm.T = 16384, hmm.B = 4, hmm.C = 32;
  CHECK(default_chain_chunk(hmm) == 64);
  hmm.C = 128, hmm.B = 1;
  CHECK(default_chain_chunk(hmm) == 0);
  // Whatever it takes fits.
  for (int64_t C : {32, 40, 64})
    for (int64_t T : {1024, 1025, 3000, 4096, 65536})
      for (int64_t B = 1; B * C <= 128; ++B) {
        const ChainProblem p = chain(B, T, C);
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(C);
        const int64_t chunk = default_chain_chunk(p);
        CHECK(chunk >= 64);
        CHECK(chunk_unfit(p, chunk).empty());
      }
}

TEST_CASE("chunked chains: the best path of one long sequence of either form in chunks of about its square root") {
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm}) {
    CAPTURE(int(form));
    auto viterbi = [&](int64_t B, int64_t T, int64_t C, DType dtype = DType::f32) {
      ChainProblem p = chain(B, T, C, dtype);
      p.semiring = Semiring::max_plus;
      p.form = form;
      return p;
    };
    CHECK(default_chain_chunk(viterbi(1, 16384, 64)) == 128);
    CHECK(default_chain_chunk(viterbi(1, 4096, 64)) == 64);
    CHECK(default_chain_chunk(viterbi(2, 65536, 32, DType::bf16)) == 256);
    CHECK(default_chain_chunk(viterbi(1, 1 << 24, 64)) == 256);
    CHECK(default_chain_chunk(viterbi(4, 16384, 64)) == 128);
    CHECK(default_chain_chunk(viterbi(1, 16384, 128)) == 128);
    CHECK(default_chain_chunk(viterbi(2, 8192, 128)) == 64);
    // More sequences, more states, shorter chains, f64: the sequential kernels.
    CHECK(default_chain_chunk(viterbi(8, 16384, 64)) == 0);
    CHECK(default_chain_chunk(viterbi(1, 16384, 256)) == 0);
    CHECK(default_chain_chunk(viterbi(1, 16384, 16)) == 0);
    CHECK(default_chain_chunk(viterbi(16, 1024, 64)) == 0);
    CHECK(default_chain_chunk(viterbi(1, 2048, 64)) == 0);
    CHECK(default_chain_chunk(viterbi(1, 16384, 64, DType::f64)) == 0);
    for (int64_t T : {4096, 5000, 16384, 100000}) CHECK(chunk_unfit(viterbi(1, T, 64), default_chain_chunk(viterbi(1, T, 64))).empty());
  }
}

TEST_CASE("chunked chains: a chunk the problem cannot take says why, naming chunk") {
  auto why = [](const ChainProblem& p, int64_t chunk) { return chunk_unfit(p, chunk); };
  CHECK(why(chain(1, 100, 8), 3).rfind("chunk: must be a power of two", 0) == 0);
  CHECK(why(chain(1, 100, 8), 0).rfind("chunk: must be a power of two", 0) == 0);
  CHECK(why(chain(1, 100, 8), int64_t(1) << 21).rfind("chunk: must be a power of two", 0) == 0);
  ChainProblem viterbi = chain(1, 100, 8);
  viterbi.semiring = Semiring::max_plus;
  CHECK(why(viterbi, 4).empty());
  viterbi.form = ChainForm::hmm;
  CHECK(why(viterbi, 4).empty());
  CHECK(why(viterbi, 2).empty()); // max_plus keeps its chunks' products in scratch: any chunk fits
  viterbi.C = kMaxSequentialChainStates + 1;
  CHECK(why(viterbi, 4).rfind("chunk: chains of at most 1024 states", 0) == 0);
  ChainProblem hmm = chain(1, 100, 8);
  hmm.form = ChainForm::hmm; // log: its products in saved, as the crf form's
  CHECK(why(hmm, 8).empty());
  CHECK(why(hmm, 4).rfind("chunk: the products of chunks of 4 steps", 0) == 0);
  CHECK(why(chain(1, 1, 8), 4).rfind("chunk: a chain of one position", 0) == 0);
  // Short chunks of many states: their products (C² each) outgrow the messages saved (2·T·C).
  CHECK(why(chain(1, 4096, 64), 2).rfind("chunk: the products of chunks of 2 steps", 0) == 0);
  CHECK(why(chain(1, 4096, 64), 64).empty());
  CHECK(why(chain(3, 77, 33), 32).empty());
  CHECK(why(chain(3, 77, 33), 128).empty()); // one chunk of the whole chain
  CHECK(why(chain(3, 77, 33), 256).rfind("chunk: longer than one chunk of the whole chain (128 steps", 0) == 0);
  CHECK(why(chain(0, 77, 33), 4).empty());
}

TEST_CASE("chunked chains: the chunk module's entry points and name, per semiring, storage dtype and states") {
  const GeneratedKernel k = emit_chunk_kernel(Semiring::log, DType::bf16, 33);
  CHECK(k.name.rfind("chain_chunks_log_bf16_c33_", 0) == 0);
  CHECK(k.entries == std::vector<std::string>{"", "_normalize", "_offsets", "_restore", "_score", "_unpad",
                                              "_hmm_nodes", "_hmm_edges", "_hmm_sums", "_hmm_cast"});
  // Steps are read and gradients written in the storage type; the tree is kept in its accumulator type.
  CHECK(k.source.find("chunk_pad<jb::bf16, 33, 256>") != std::string::npos);
  CHECK(k.source.find("chunk_normalize<float, 33, 256>") != std::string::npos);
  CHECK(k.source.find("chunk_unpad<jb::bf16, 33>") != std::string::npos);
  CHECK(emit_chunk_kernel(Semiring::log, DType::f64, 64).source.find("chunk_restore<double, 64>") != std::string::npos);
  const GeneratedKernel v = emit_chunk_kernel(Semiring::max_plus, DType::f16, 64);
  CHECK(v.name.rfind("chain_chunks_max_plus_f16_c64_", 0) == 0);
  CHECK(v.entries == std::vector<std::string>{"", "_normalize", "_offsets", "_chain", "_rerun", "_compose", "_expand"});
  // The chain of chunks reads the inputs' storage type for its first messages, the rerun for its steps.
  CHECK(v.source.find("chunk_chain<jb::f16, 64, 256>") != std::string::npos);
  CHECK(v.source.find("chunk_rerun<jb::f16, 64, 256>") != std::string::npos);
  CHECK(v.source.find("chunk_unpad<") == std::string::npos); // no log backward
}
