// The CPU reference: the oracle of every test. Exact semantics of the README's contract, computed from the stored
// inputs in double (f32/f16/bf16 inputs) or long double (f64 inputs), never rounded to the output dtype (compare
// with round_to(output_dtype, value)).
#pragma once

#include <cstdint>
#include <vector>

#include "jitbmm/chain_problem.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm::reference {

struct Element {
  double value = 0;    // the exact result (before rounding to the output dtype)
  int32_t argmax = -1; // winning k for selecting semirings (ties: smallest k; first NaN wins), else -1
  double scale = 1;    // magnitude that bounds the rounding error: max(1,|value|), or Σ|a·b| for plus_times
  bool tie = false;    // another k reached the winning value (argmax is then a tie-break, not a choice)
};

// What the reference computes in reasonable memory and time; beyond these it throws std::invalid_argument naming the
// size ("shape.K: ...") rather than running for hours or exhausting memory. One output holds its K terms in memory.
constexpr int64_t kMaxReferenceK = int64_t(1) << 26;
constexpr int64_t kMaxReferenceOutputs = int64_t(1) << 28; // compute(): the result vector
constexpr int64_t kMaxReferenceTerms = int64_t(1) << 36;   // compute(), backward(): B*M*N*K

// One output element out[batch, i, j] from host arrays laid out as the problem's strides say. The problem is not
// validated here (callers have); K above kMaxReferenceK is std::invalid_argument naming shape.K.
Element element(const Problem& problem, const void* a, const void* b, int64_t batch, int64_t i, int64_t j);

// The argmax a correct kernel reports for out[batch, i, j], `expected` being that output's element: the reference's
// own where no other k reached its value; at a tie, each term formed as a kernel forms it (a + b or a · b in the
// accumulator type: float for f32, f16 and bf16 inputs, double for f64), where two exact terms closer than the
// accumulator resolves are equal, the first NaN term winning, else the smallest k among the best (K = 0: −1).
int32_t kernel_argmax(const Problem& problem, const void* a, const void* b, int64_t batch, int64_t i, int64_t j,
                      const Element& expected);

// Every output, in row-major [B][M][N] order. Validates the problem, and refuses (std::invalid_argument naming the
// size) more than kMaxReferenceOutputs outputs, kMaxReferenceTerms terms or kMaxReferenceK terms an output. An empty
// output (B, M or N = 0) has no term to compute: it is an empty result whatever K is.
std::vector<Element> compute(const Problem& problem, const void* a, const void* b);

} // namespace jitbmm::reference

namespace jitbmm {

// Host conversions between storage dtypes and double, shared by the reference, the tests and the CLI.
double load_element(DType dtype, const void* base, int64_t index);
void store_element(DType dtype, void* base, int64_t index, double value); // rounds to nearest even
double round_to(DType dtype, double value);                               // value as the dtype stores it

} // namespace jitbmm

namespace jitbmm::reference {

// Gradients of a scalar loss L with dL/dout = grad_out ([B][M][N], contiguous, double), from the inputs (laid out
// as the problem's strides say). grad_a / grad_b are written at a's / b's own offsets (sized like a's / b's
// storage), so a broadcast operand accumulates its batch's contributions. Either may be null.
//   log:         dA[b,i,k] = Σ_j G[b,i,j]·exp(a[b,i,k] + b[b,k,j] − out[b,i,j]); dB likewise over i.
//                An output whose terms are all −inf contributes nothing (not NaN); G = 0 contributes exactly 0.
//   max_plus, min_plus: G goes to the argmax k (ties: smallest k). max_times: G·partner to the argmax k.
//   plus_times:  dA = G·Bᵀ, dB = Aᵀ·G.
// `out` / `argmax` ([B][M][N] contiguous): the forward's results to use instead of the exact ones (as the GPU
// backward does); null: computed here. Bounded like compute() (std::invalid_argument naming the size); an empty
// output only zeroes the gradients.
void backward(const Problem& problem, const void* a, const void* b, const double* grad_out, double* grad_a,
              double* grad_b, const double* out = nullptr, const int32_t* argmax = nullptr);

// One element of one batch's contribution to grad_a (pass grad_a: row i, col k) or grad_b (grad_b: row k, col j),
// with the magnitude that bounds a correct kernel's error: scale = Σ|contribution|·max(1, |a| + |b| + |out|) for
// log (the exponent's rounding), Σ|contribution| otherwise; floor = Σ|G|·2^-120 (f32 and half types: weights
// below 2^-126 flush to 0), Σ|G|·2^-1000 for f64. out / argmax / grad_out as for backward().
struct GradElement {
  double value = 0, scale = 0, floor = 0;
};
GradElement gradient_element(const Problem& problem, const void* a, const void* b, const double* out,
                             const int32_t* argmax, const double* grad_out, Pass pass, int64_t batch, int64_t row,
                             int64_t col);
// A gradient read back from the device against the reference: special values (of the reference rounded to the
// dtype) must match exactly; finite ones within tolerance · scale + floor, plus the rounding to the dtype.
bool close_gradient(DType dtype, double got, const GradElement& want, double tolerance);

// Whether a computed output `got` (already read back as double) agrees with the reference element: special values
// (NaN, ±inf of the rounded reference) must match exactly; finite values within tolerance · scale.
bool close(DType out_dtype, double got, const Element& expected, double tolerance);

// The tolerance each dtype is tested to (fp64 1e-12, fp32 1e-5, fp16/bf16 1e-2).
double tolerance(DType dtype);
// The tolerance of a problem's outputs: its output dtype's, or 2e-3 for the log semiring at Precision::fast.
double tolerance(const Problem& problem);


// The chain on the CPU, in double (long double for f64): the oracle of the chain tests. Inputs as ChainProblem
// says (host memory; lengths may be null when the problem has none). score[B]; alpha[B][T][C] (may be null);
// path[B][T] (max_plus, may be null; ties: smallest state; −1 past a length, and throughout for a sequence whose
// score is −inf). Validates the problem.
void chain_forward(const ChainProblem& problem, const void* potentials, const int64_t* lengths, double* score,
                   double* alpha, int32_t* path);
// grad_potentials[B][T − 1][C][C] for dL/dscore = grad_score[B], as ChainPlan::backward defines it.
void chain_backward(const ChainProblem& problem, const void* potentials, const int64_t* lengths,
                    const double* grad_score, double* grad_potentials);
// The HMM form (problem.form = hmm; the two above refuse it), its tables in host memory: score, alpha (alpha[b][0]
// = initial ⊗ emissions[b][0]) and path as chain_forward gives them; the tables' gradients (each may be null) as
// ChainPlan::backward defines them, contiguous.
void chain_forward(const ChainProblem& problem, const HmmInputs& hmm, const int64_t* lengths, double* score,
                   double* alpha, int32_t* path);
void chain_backward(const ChainProblem& problem, const HmmInputs& hmm, const int64_t* lengths,
                    const double* grad_score, double* grad_emissions, double* grad_transitions, double* grad_initial);

// The chain's distribution over paths (the log semiring's: p(path) = exp(score − score of the chain), over the
// paths of each sequence's length; the CRF form's potentials, in double or long double as above). entropy[B]:
// −Σ p log p. cross_entropy[B]: −Σ p log q, and kl[B]: Σ p log(p / q), of p against q, the distribution of `other`
// (potentials of the same problem, laid out alike); either output may be null, not both. The entropy and the
// cross-entropy are summed by the chain rule over positions as terms of one sign (no cancellation), the KL as
// log p − log q event by event. A sequence whose distribution does not exist (its score
// −inf, +inf or NaN; q's +inf or NaN) gives NaN; where p gives weight to an event q gives none, the cross-entropy and
// the KL are +inf. The problem's semiring must be log.
void chain_entropy(const ChainProblem& problem, const void* potentials, const int64_t* lengths, double* entropy);
void chain_cross_entropy(const ChainProblem& problem, const void* potentials, const void* other, const int64_t* lengths,
                         double* cross_entropy, double* kl);

// Their gradients with respect to p's potentials (grad_potentials) and, for the cross-entropy and KL, q's
// (grad_other, may be null), [B][T − 1][C][C] contiguous, 0 past a sequence's length, for upstream gradients
// grad_entropy[B], or grad_cross_entropy[B] and grad_kl[B] (either may be null: zero). With p's edge marginals μ
// and R a path's sum of edge scores r, Cov_p(1_e, R) = μ_e (a_t(from) + r_e + b_{t+1}(c) − E_p[R]), where a and b
// are R's expectations over the edges before and after the edge given its states: ∂H/∂θp = −Cov_p(1_e, θp),
// ∂CE/∂θp = −Cov_p(1_e, θq), ∂KL/∂θp = Cov_p(1_e, θp − θq), ∂CE/∂θq = ∂KL/∂θq = μq − μp. A sequence whose value is
// not finite has NaN gradients at every edge of its length; one whose upstream gradients are 0 has zeros.
void chain_entropy_backward(const ChainProblem& problem, const void* potentials, const int64_t* lengths,
                            const double* grad_entropy, double* grad_potentials);
void chain_cross_entropy_backward(const ChainProblem& problem, const void* potentials, const void* other,
                                  const int64_t* lengths, const double* grad_cross_entropy, const double* grad_kl,
                                  double* grad_potentials, double* grad_other);

// Of the chain's paths (the CRF form's potentials): log_count[B], the log of the number of paths of each sequence's
// length whose every edge's potential is other than −inf (torch-struct's count, in log space, so that long chains do
// not overflow; NaN and +inf count as edges; −inf where no path is left, log C for one position), whatever the
// problem's semiring. log_prob[B] (the log semiring) of events `value` [B][T − 1][C][C] in double (a path's edge indicators,
// read up to each sequence's length): Σ value·potential − log Z, where a value of 0 adds nothing whatever its
// potential; NaN where the sequence has no distribution (log Z −inf, +inf or NaN).
void chain_count(const ChainProblem& problem, const void* potentials, const int64_t* lengths, double* log_count);
void chain_log_prob(const ChainProblem& problem, const void* potentials, const int64_t* lengths, const double* value,
                    double* log_prob);

// n exact samples of each sequence's path from its distribution (the log semiring's, as above; the CRF form's
// potentials), by forward filtering and backward sampling: paths[B][n][T], each path's states, −1 past a length and
// throughout for a sequence without a distribution (its score −inf, +inf or NaN). A path of probability 0 (an edge
// of −inf) is never drawn. Sequence b's draws depend on the seed, b and its own potentials alone: the same seed
// draws the same paths, whatever the other sequences hold. n ≥ 0, n·T within kMaxReferenceOutputs
// (std::invalid_argument naming n).
void chain_sample(const ChainProblem& problem, const void* potentials, const int64_t* lengths, int64_t n,
                  uint64_t seed, int32_t* paths);
// The same in the HMM form, from its tables (its length-1 sequences draw their state from initial ⊗ emissions[0]).
void chain_sample(const ChainProblem& problem, const HmmInputs& hmm, const int64_t* lengths, int64_t n, uint64_t seed,
                  int32_t* paths);

// The k best paths (the problem's semiring must be max_plus; the CRF form's potentials): scores[B][k] in
// non-increasing order, NaN first as Viterbi's winner; paths[B][k][T] (may be null), each path's states. Paths of
// equal score are in the order of their states read from the last position back, smaller first, where their
// prefixes' scores tie exactly as well; where rounding alone made the scores equal, the one of the better prefix
// comes first, as Viterbi breaks that tie. So the first is Viterbi's (chain_forward's path). A sequence with fewer than k paths of score other than −inf gives −inf and −1
// for the rest; −1 past a length. 1 ≤ k ≤ kMaxReferenceBestPaths, and k times the chain's work and messages within
// the bounds above (std::invalid_argument naming k).
constexpr int kMaxReferenceBestPaths = 1024;
void chain_kbest(const ChainProblem& problem, const void* potentials, const int64_t* lengths, int k, double* scores,
                 int32_t* paths);
// The same in the HMM form, from its tables: the first position's paths start at initial ⊗ emissions[0], and a
// step's candidates are chosen by the lists ⊗ transitions, the emission of the state they go to ⊗-ed on after
// (the HMM form's Viterbi, chain_forward's path, is the first).
void chain_kbest(const ChainProblem& problem, const HmmInputs& hmm, const int64_t* lengths, int k, double* scores,
                 int32_t* paths);

// The expectation (entropy) semiring's product (torch-struct's EntropySemiring.matmul) of pairs a [2][B][M][K] and b
// [2][B][K][N], contiguous in `dtype` (f32 or f64): with x0_k = a0[i][k] + b0[k][j] and x1_k = a1[i][k] + b1[k][j],
// out0 = log Σ_k e^{x0_k} and out1 = Σ_k p_k (x1_k − log p_k), p_k = e^{x0_k − out0}, where a term of weight 0 (x0 =
// −inf, or p_k rounding to 0) adds nothing whatever its x1 (no term: −inf and 0); out [2][B][M][N]. The backward's gradients of Σ grad_out·out with
// respect to a and b (either may be null), in their layouts: ∂out0/∂x0_k = p_k, ∂out1/∂x1_k = p_k, ∂out1/∂x0_k = p_k
// (x1_k − log p_k − out1). Up to kMaxReferenceTerms terms (std::invalid_argument naming the field otherwise).
struct EntropyProductShape {
  DType dtype = DType::f32;
  int64_t B = 1, M = 1, K = 1, N = 1;
};
void entropy_product(const EntropyProductShape& shape, const void* a, const void* b, double* out);
void entropy_product_backward(const EntropyProductShape& shape, const void* a, const void* b, const double* grad_out,
                              double* grad_a, double* grad_b);

// The k-max semiring's product (torch-struct's KMaxSemiring(k).matmul) of k-vectors a [k][B][M][K] and b
// [k][B][K][N], contiguous in `dtype` (f32 or f64): out[r][b][i][j] (double, [k][B][M][N]) the r-th largest of
// a[r1][b][i][kk] + b[r2][b][kk][j] over kk, r1 and r2, NaN before every number and equal values in the order of
// (kk, r1, r2); index (may be null) = (kk·k + r1)·k + r2 of each. A candidate of −inf is none: −inf and −1 where fewer
// than k are left. 1 ≤ k ≤ 16 and B·M·K·N·k² within kMaxReferenceTerms (std::invalid_argument naming the field).
struct KMaxProductShape {
  DType dtype = DType::f32;
  int k = 1;
  int64_t B = 1, M = 1, K = 1, N = 1;
};
void kmax_product(const KMaxProductShape& shape, const void* a, const void* b, double* out, int32_t* index);

} // namespace jitbmm::reference
