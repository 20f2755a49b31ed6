// Samples of chains' paths on the GPU (ChainSampler) held to the test the CPU reference sampler passes
// (tests/samples_fit.hpp): every path of small chains drawn as often as its probability says, each step's edges of
// longer chains as often as the exact marginals say, and the power to reject a nearby distribution; −1 where there is
// no path to draw; the same seed the same paths, given on the host or read on the device. The HMM form's from its
// tables against the marginals of the formed potentials, and its one-position sequences' first state.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "expect.hpp"
#include "hmm_arrays.hpp"
#include "jitbmm/chain_samples.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"
#include "samples_fit.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

namespace {

// paths[B][n][T] drawn on the device from potentials held as double and stored in the problem's dtype (poisoned
// first, so that a path the kernel skips shows).
std::vector<int32_t> draw(const ChainProblem& p, const std::vector<double>& pot, const int64_t* lengths, int64_t n,
                          uint64_t seed, bool seed_on_device = false) {
  const int bytes = dtype_info(p.dtype).size_bytes;
  std::vector<unsigned char> host(pot.size() * bytes + 1);
  for (std::size_t i = 0; i < pot.size(); ++i) store_element(p.dtype, host.data(), int64_t(i), pot[i]);
  DeviceBuffer d_pot(host.size()), d_paths(std::size_t(p.B * n * p.T) * 4 + 1),
      d_len = upload(lengths ? std::vector<int64_t>(lengths, lengths + p.B) : std::vector<int64_t>{});
  d_pot.upload(host.data(), host.size());
  d_paths.fill_bytes(0x7f);
  const ChainSampler sampler = ChainSampler::get(p);
  const int64_t* d_lengths = lengths ? static_cast<const int64_t*>(d_len.get()) : nullptr;
  if (seed_on_device) {
    const DeviceBuffer d_seed = upload(std::vector<uint64_t>{seed});
    sampler.with_device_seed(d_pot.get(), d_lengths, n, static_cast<const uint64_t*>(d_seed.get()),
                             static_cast<int32_t*>(d_paths.get()));
  } else {
    sampler(d_pot.get(), d_lengths, n, seed, static_cast<int32_t*>(d_paths.get()));
  }
  std::vector<int32_t> paths(std::size_t(p.B * n * p.T));
  if (!paths.empty()) d_paths.download(paths.data(), paths.size() * 4);
  return paths;
}

// Each step's edge counts of `paths` against the exact marginals of `pot` (and of pot times 1.5: how many steps
// reject them); (fitted, rejected).
std::pair<int, int> fit_steps(const ChainProblem& p, const std::vector<double>& pot,
                              const std::vector<int64_t>& lengths, const std::vector<int32_t>& paths, int64_t n) {
  const std::vector<double> read = rounded(p.dtype, pot); // the values the kernels read
  std::vector<double> hotter(read);
  for (double& x : hotter) x *= 1.5;
  ChainProblem wide = p;
  wide.dtype = DType::f64;
  const std::vector<double> ones(p.B, 1.0);
  std::vector<double> mu(pot.size()), mu_hot(pot.size());
  reference::chain_backward(wide, read.data(), lengths.data(), ones.data(), mu.data());
  reference::chain_backward(wide, hotter.data(), lengths.data(), ones.data(), mu_hot.data());
  const int64_t C = p.C, steps = p.T - 1;
  int fitted = 0, rejected = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t + 1 < lengths[b]; ++t) {
      std::vector<int64_t> counts(std::size_t(C * C), 0);
      for (int64_t i = 0; i < n; ++i) {
        const int32_t* path = paths.data() + (b * n + i) * p.T;
        REQUIRE(path[t] >= 0);
        REQUIRE(path[t + 1] >= 0);
        ++counts[std::size_t(path[t + 1] * C + path[t])]; // [to][from], the potentials' order
      }
      const auto at = std::size_t((b * steps + t) * C * C);
      const SampleFit f = fit_samples(counts, std::vector<double>(mu.begin() + at, mu.begin() + at + C * C));
      CHECK_MESSAGE(f.ok(), dtype_info(p.dtype).name << " C=" << C << " b=" << b << " t=" << t << " chi2=" << f.chi2
                                                     << " dof=" << f.dof << " impossible=" << f.impossible);
      ++fitted;
      rejected += !fit_samples(counts, std::vector<double>(mu_hot.begin() + at, mu_hot.begin() + at + C * C)).ok();
    }
  return {fitted, rejected};
}

} // namespace

TEST_CASE(
    "chain samples: every path of small chains is drawn as often as its probability says, and only one that can be") {
  std::mt19937_64 rng(20261210);
  const int64_t n = 4000;
  int fitted = 0, without = 0;
  for_each_small_chain(rng, 1.0,
                       [&](const ChainProblem& p, const std::vector<double>& pot, const std::vector<double>&,
                           const std::vector<int64_t>& lengths, const int64_t* len, double p_mask) {
                         const std::vector<int32_t> paths = draw(p, pot, len, n, 99);
                         std::vector<double> score(p.B);
                         reference::chain_forward(p, pot.data(), len, score.data(), nullptr, nullptr);
                         for (int64_t b = 0; b < p.B; ++b) {
                           const int64_t L = lengths[b];
                           const int32_t* first = paths.data() + b * n * p.T;
                           if (!std::isfinite(score[b])) {
                             ++without;
                             for (int64_t i = 0; i < n * p.T; ++i) REQUIRE(first[i] == -1);
                             continue;
                           }
                           std::vector<int64_t> counts(std::size_t(std::pow(double(p.C), double(L)) + 0.5), 0);
                           for (int64_t i = 0; i < n; ++i) {
                             const int32_t* path = first + i * p.T;
                             for (int64_t t = 0; t < L; ++t) REQUIRE((path[t] >= 0 && path[t] < p.C));
                             for (int64_t t = L; t < p.T; ++t) REQUIRE(path[t] == -1);
                             ++counts[std::size_t(path_code(path, L, p.C))];
                           }
                           const SampleFit f = fit_samples(counts, path_probabilities(p, pot, b, L, 1.0));
                           CHECK_MESSAGE(f.ok(), "C=" << p.C << " L=" << L << " mask=" << p_mask << " chi2=" << f.chi2
                                                      << " dof=" << f.dof << " impossible=" << f.impossible);
                           ++fitted;
                         }
                       });
  CHECK(fitted >= 100);
  MESSAGE(fitted << " sequences fitted, " << without << " without a distribution");
}

TEST_CASE("chain samples: each step's edges of longer chains are drawn as often as the marginals say, every dtype") {
  struct Case {
    DType dtype;
    int64_t B, T, C, n;
    double mask;
  } cases[] = {{DType::f32, 2, 30, 6, 20000, 0.2},
               {DType::f64, 2, 12, 33, 60000, 0.0},
               {DType::bf16, 1, 8, 40, 100000, 0.1},
               {DType::f16, 1, 6, 70, 200000, 0.0}};
  std::mt19937_64 rng(20261211);
  for (const Case& k : cases) {
    ChainProblem p;
    p.dtype = k.dtype;
    p.B = k.B, p.T = k.T, p.C = k.C;
    p.with_lengths = true;
    const std::vector<double> pot = random_potentials(rng, p, k.mask, false);
    std::vector<int64_t> lengths = random_lengths(rng, p);
    lengths[0] = p.T;
    const std::vector<int32_t> paths = draw(p, pot, lengths.data(), k.n, 5);
    const auto [fitted, rejected] = fit_steps(p, pot, lengths, paths, k.n);
    CHECK(fitted >= p.T - 1);
    CHECK(rejected >= fitted / 2); // most steps tell the two temperatures apart
    MESSAGE(std::string(dtype_info(p.dtype).name) << " C=" << p.C << ": " << rejected << " of " << fitted
                                                  << " steps rejected the lower temperature's marginals");
  }
}

TEST_CASE("chain samples: a seed draws the same paths, a sequence's are its own; no path where none can be drawn") {
  ChainProblem p;
  p.B = 3, p.T = 9, p.C = 5;
  p.with_lengths = true;
  std::mt19937_64 rng(20261212);
  std::vector<double> pot = random_potentials(rng, p, 0.0, false);
  const std::vector<int64_t> lengths = {9, 4, 11}; // the last outside [1, T]: no path
  const int64_t n = 64, per = n * p.T;
  const std::vector<int32_t> first = draw(p, pot, lengths.data(), n, 42), again = draw(p, pot, lengths.data(), n, 42),
                             other_seed = draw(p, pot, lengths.data(), n, 43);
  CHECK(first == again);
  CHECK(first != other_seed);
  CHECK(draw(p, pot, lengths.data(), n, 42, true) == first); // the seed read on the device draws the same paths
  for (int64_t i = 2 * per; i < 3 * per; ++i) REQUIRE(first[i] == -1);
  // Sequence 1's potentials changed, and −inf everywhere in sequence 0: sequence 0 has no path, 1 draws anew, and
  // nothing else moves.
  for (std::size_t i = 0; i < std::size_t((p.T - 1) * p.C * p.C); ++i) pot[i] = -kInf;
  for (std::size_t i = std::size_t((p.T - 1) * p.C * p.C); i < std::size_t(2 * (p.T - 1) * p.C * p.C); ++i) pot[i] *= 2;
  const std::vector<int32_t> changed = draw(p, pot, lengths.data(), n, 42);
  for (int64_t i = 0; i < per; ++i) REQUIRE(changed[i] == -1);
  for (int64_t i = 2 * per; i < 3 * per; ++i) REQUIRE(changed[i] == -1);

  ChainProblem empty = p;
  empty.B = 0;
  CHECK_NOTHROW(ChainSampler::get(empty)(nullptr, nullptr, 5, 1, nullptr));
  const ChainSampler sampler = ChainSampler::get(p);
  CHECK_NOTHROW(sampler(nullptr, nullptr, 0, 1, nullptr)); // n = 0: nothing to draw
  DeviceBuffer d_pot(pot.size() * 4), out(std::size_t(per * p.B) * 4);
  expect_invalid([&] { sampler(d_pot.get(), nullptr, n, 1, static_cast<int32_t*>(out.get())); }, "lengths");
  expect_invalid([&] { sampler(d_pot.get(), nullptr, -1, 1, static_cast<int32_t*>(out.get())); }, "n");
  expect_invalid([&] { sampler.with_device_seed(d_pot.get(), nullptr, n, nullptr, static_cast<int32_t*>(out.get())); },
                 "seed_on_device");
  ChainProblem bad = p;
  bad.semiring = Semiring::max_plus;
  expect_invalid([&] { ChainSampler::get(bad); }, "chain.semiring");
  bad = p;
  bad.strides[0] = 1;
  expect_invalid([&] { ChainSampler::get(bad); }, "chain.strides");
}

namespace {

// The HMM form's paths[B][n][T] drawn on the device from its tables (held as double, stored in the problem's dtype).
std::vector<int32_t> draw_hmm(const ChainProblem& p, const HmmTables& h, const std::vector<int64_t>& lengths, int64_t n,
                              uint64_t seed, bool seed_on_device = false) {
  const DeviceBuffer e = stored(p.dtype, h.emissions), t = stored(p.dtype, h.transitions),
                     i = stored(p.dtype, h.initial), d_len = upload(lengths);
  DeviceBuffer d_paths(std::size_t(p.B * n * p.T) * 4 + 1);
  d_paths.fill_bytes(0x7f);
  const ChainSampler sampler = ChainSampler::get(p);
  const HmmInputs in{e.get(), t.get(), i.get()};
  const auto* len = static_cast<const int64_t*>(d_len.get());
  if (seed_on_device) {
    const DeviceBuffer d_seed = upload(std::vector<uint64_t>{seed});
    sampler.with_device_seed(in, len, n, static_cast<const uint64_t*>(d_seed.get()),
                             static_cast<int32_t*>(d_paths.get()));
  } else {
    sampler(in, len, n, seed, static_cast<int32_t*>(d_paths.get()));
  }
  std::vector<int32_t> paths(std::size_t(p.B * n * p.T));
  if (!paths.empty()) d_paths.download(paths.data(), paths.size() * 4);
  return paths;
}

ChainProblem hmm_problem(DType dtype, int64_t B, int64_t T, int64_t C, bool batched) {
  ChainProblem p;
  p.dtype = dtype;
  p.B = B, p.T = T, p.C = C;
  p.with_lengths = true;
  p.form = ChainForm::hmm;
  p.batched_transitions = p.batched_initial = batched;
  return p;
}

} // namespace

TEST_CASE("chain samples, the HMM form: each step's moves as often as the formed chain's marginals say, a "
          "one-position sequence's state as initial and emissions say; every dtype") {
  struct Case {
    DType dtype;
    int64_t B, T, C, n;
    bool batched;
  } cases[] = {{DType::f32, 3, 20, 6, 20000, false},
               {DType::f64, 2, 10, 33, 60000, true},
               {DType::bf16, 2, 8, 40, 100000, false}};
  std::mt19937_64 rng(20261207);
  for (const Case& k : cases) {
    const ChainProblem p = hmm_problem(k.dtype, k.B, k.T, k.C, k.batched);
    const HmmTables h = random_hmm_tables(rng, p, 0.1, false);
    std::vector<int64_t> lengths = random_lengths(rng, p);
    lengths[0] = p.T, lengths[1] = 1;
    const std::vector<int32_t> paths = draw_hmm(p, h, lengths, k.n, 9);
    // Each step: the CRF form's marginals of the formed potentials (from the values the kernels read).
    const std::vector<double> pot = formed_potentials(p, rounded(p.dtype, h));
    ChainProblem crf = crf_of(p);
    crf.dtype = DType::f64;
    const auto [fitted, rejected] = fit_steps(crf, pot, lengths, paths, k.n);
    CHECK(fitted >= p.T - 1);
    CHECK(rejected >= fitted / 2);
    // Sequence 1 has one position: its state against softmax(initial + emissions[1][0]).
    const HmmTables v = rounded(p.dtype, h);
    std::vector<double> first(std::size_t(p.C)), probs;
    for (int64_t c = 0; c < p.C; ++c)
      first[std::size_t(c)] =
          v.initial[std::size_t((p.batched_initial ? p.C : 0) + c)] + v.emissions[std::size_t(p.T * p.C + c)];
    const double m = *std::max_element(first.begin(), first.end());
    double total = 0;
    for (double x : first) total += std::exp(x - m);
    for (double x : first) probs.push_back(std::exp(x - m) / total);
    std::vector<int64_t> counts(std::size_t(p.C), 0);
    for (int64_t i = 0; i < k.n; ++i) {
      const int32_t* path = paths.data() + (1 * k.n + i) * p.T;
      REQUIRE((path[0] >= 0 && path[0] < p.C));
      for (int64_t t = 1; t < p.T; ++t) REQUIRE(path[t] == -1);
      ++counts[std::size_t(path[0])];
    }
    const SampleFit f = fit_samples(counts, probs);
    CHECK_MESSAGE(f.ok(), dtype_info(p.dtype).name << " one position: chi2=" << f.chi2 << " dof=" << f.dof);
  }
}

TEST_CASE("chain samples, the HMM form: a seed draws the same paths, on the host or the device; no path where none "
          "can be drawn; the other form's call is named") {
  const ChainProblem p = hmm_problem(DType::f32, 3, 9, 5, true);
  std::mt19937_64 rng(3);
  HmmTables h = random_hmm_tables(rng, p, 0.0, false);
  const std::vector<int64_t> lengths = {9, 4, 11}; // the last outside [1, T]: no path
  const int64_t n = 64, per = n * p.T;
  const std::vector<int32_t> first = draw_hmm(p, h, lengths, n, 42);
  CHECK(first == draw_hmm(p, h, lengths, n, 42));
  CHECK(first != draw_hmm(p, h, lengths, n, 43));
  CHECK(draw_hmm(p, h, lengths, n, 42, true) == first);
  for (int64_t i = 2 * per; i < 3 * per; ++i) REQUIRE(first[i] == -1);
  for (int64_t c = 0; c < p.C; ++c) h.emissions[std::size_t(p.T * p.C + 2 * p.C + c)] = -kInf; // sequence 1, t = 2
  const std::vector<int32_t> none = draw_hmm(p, h, lengths, n, 42);
  for (int64_t i = per; i < 2 * per; ++i) REQUIRE(none[i] == -1);
  CHECK(std::equal(none.begin(), none.begin() + per, first.begin())); // sequence 0's paths are its own

  const ChainSampler sampler = ChainSampler::get(p);
  DeviceBuffer buf(4096), out(std::size_t(per * p.B) * 4);
  expect_invalid([&] { sampler(buf.get(), nullptr, n, 1, static_cast<int32_t*>(out.get())); }, "potentials");
  expect_invalid(
      [&] {
        sampler(HmmInputs{buf.get(), buf.get(), nullptr}, static_cast<const int64_t*>(buf.get()), n, 1,
                static_cast<int32_t*>(out.get()));
      },
      "hmm.initial");
  ChainProblem crf = crf_of(p);
  expect_invalid(
      [&] {
        ChainSampler::get(crf)(HmmInputs{buf.get(), buf.get(), buf.get()}, nullptr, n, 1,
                               static_cast<int32_t*>(out.get()));
      },
      "hmm");
  ChainProblem empty = p;
  empty.B = 0;
  CHECK_NOTHROW(ChainSampler::get(empty)(HmmInputs{}, nullptr, 5, 1, nullptr));
}
