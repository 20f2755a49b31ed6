// Validation of ChainProblem and its potentials' strides: the checks every chain entry point runs first.
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>

#include "jitbmm/chain_problem.hpp"
#include "support/checked_size.hpp"
#include "support/layout.hpp"

namespace jitbmm {

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw std::invalid_argument("chain." + field + ": " + what);
}

// A [B][dims...] array of `bytes`-byte elements must fit in kMaxOperandBytes. B = 0 is sized as 1: the contiguous
// batch stride of an empty batch must still fit.
void check_holds(const char* field, const char* letters, int64_t B, std::initializer_list<int64_t> dims, int bytes) {
  std::optional<int64_t> elements = B == 0 ? 1 : B;
  std::string values = std::to_string(B);
  for (int64_t d : dims) {
    values += "*" + std::to_string(d);
    if (elements) elements = try_product({*elements, d});
  }
  if (!elements || *elements > kMaxOperandBytes / bytes)
    fail(field, std::string(letters) + " = " + values + " elements of " + std::to_string(bytes) +
                    " bytes: more than 2^62 bytes");
}

// The last element an array of `extents` at `strides` addresses must lie within kMaxOperandBytes. Nothing is
// addressed when an extent is 0.
void check_span(const char* field, const char* letters, std::initializer_list<int64_t> extents,
                const int64_t* strides, int bytes) {
  const std::optional<int64_t> last = try_max_offset(extents, strides);
  if (last && span_fits(*last, bytes)) return;
  std::string values, listed;
  for (std::size_t i = 0; i < extents.size(); ++i) {
    values += (i ? "*" : "") + std::to_string(extents.begin()[i]);
    listed += (i ? ", " : "") + std::to_string(strides[i]);
  }
  fail(field, "addresses more than 2^62 bytes (strides " + listed + " over " + letters + " = " + values + ")");
}

void check_strides(const char* field, const int64_t* strides, int n) {
  for (int i = 0; i < n; ++i)
    if (strides[i] < 0)
      fail(std::string(field) + "[" + std::to_string(i) + "]",
           "must be non-negative (got " + std::to_string(strides[i]) + ")");
}

// The hmm form's fields on a crf problem: nothing reads them, so a caller who set them meant the other form.
void check_no_tables(const ChainProblem& p) {
  const char* why = "the crf form has no tables (set form to hmm, or pass the potentials with `strides`)";
  if (p.batched_transitions) fail("batched_transitions", why);
  if (p.batched_initial) fail("batched_initial", why);
  const struct {
    const char* field;
    const int64_t* strides;
    int n;
  } tables[] = {{"emission_strides", p.emission_strides, 3},
                {"transition_strides", p.transition_strides, 3},
                {"initial_strides", p.initial_strides, 2}};
  for (const auto& t : tables)
    for (int i = 0; i < t.n; ++i)
      if (t.strides[i] != 0) fail(std::string(t.field) + "[" + std::to_string(i) + "]", why);
}

} // namespace

void check_chain_problem(const ChainProblem& p) {
  if (p.semiring != Semiring::log && p.semiring != Semiring::max_plus) {
    const int s = static_cast<int>(p.semiring);
    fail("semiring", (s >= 0 && s < semiring_count() ? std::string("'") + semiring_info(p.semiring).name + "'"
                                                     : "enum value " + std::to_string(s)) +
                         " is not supported (expected log or max_plus)");
  }
  const int d = static_cast<int>(p.dtype);
  if (d < 0 || d >= dtype_count())
    fail("dtype", "enum value " + std::to_string(d) + " is not supported (expected f32, f64, f16 or bf16)");
  if (p.B < 0 || p.B > kMaxChainSequences) fail("B", "must be in [0, 2^30 - 1] (got " + std::to_string(p.B) + ")");
  if (p.T < 1) fail("T", "must be at least 1 (got " + std::to_string(p.T) + ")");
  if (p.C < 1 || p.C > kMaxChainStates)
    fail("C", "must be in [1, " + std::to_string(kMaxChainStates) + "] (got " + std::to_string(p.C) + ")");
  if (p.C > kMaxSequentialChainStates && p.T > kMaxSteppedChainLength && p.B > 0) // no strategy runs it
    fail("T", "beyond " + std::to_string(kMaxSequentialChainStates) +
                  " states only the stepped strategy runs, which takes at most 2^24 positions (got " +
                  std::to_string(p.T) + ")");
  if (p.form != ChainForm::crf && p.form != ChainForm::hmm)
    fail("form", "enum value " + std::to_string(static_cast<int>(p.form)) + " is not a form (expected crf or hmm)");
  if (p.form == ChainForm::crf) check_no_tables(p);
  check_strides("strides", p.strides, 4);
  check_strides("emission_strides", p.emission_strides, 3);
  check_strides("transition_strides", p.transition_strides, 3);
  check_strides("initial_strides", p.initial_strides, 2);
  // Sizes before strides: the contiguous strides are products of sizes. What the calls write is contiguous: alpha
  // [B][T][C] in the output dtype (path [B][T] int32 is no larger) and grad_potentials [B][T − 1][C][C], which is
  // also the contiguous potentials.
  const int bytes = dtype_info(p.dtype).size_bytes;
  check_holds("alpha", "B*T*C", p.B, {p.T, p.C}, dtype_info(chain_output_dtype(p)).size_bytes);
  if (p.form == ChainForm::crf)
    check_holds("potentials", "B*(T-1)*C*C", p.B, {p.T - 1, p.C, p.C}, bytes);
  else
    check_holds("transitions", "B*C*C", p.B, {p.C, p.C}, bytes); // a batched table's gradient
  if (p.form == ChainForm::hmm) {
    for (int i = 0; i < 4; ++i)
      if (p.strides[i] != 0)
        fail("strides[" + std::to_string(i) + "]", "the hmm form has no potentials (its tables have their own strides)");
    const HmmStrides st = hmm_strides(p);
    check_span("emissions", "B*T*C", {p.B, p.T, p.C}, st.emissions, bytes);
    check_span("transitions", "B*C*C", {p.batched_transitions ? p.B : 1, p.C, p.C}, st.transitions, bytes);
    check_span("initial", "B*C", {p.batched_initial ? p.B : 1, p.C}, st.initial, bytes);
    return;
  }
  if (p.B == 0 || p.T == 1) return; // no potential is read, whatever the strides
  int64_t st[4];
  chain_strides(p, st);
  check_span("potentials", "B*(T-1)*C*C", {p.B, p.T - 1, p.C, p.C}, st, bytes);
}

DType chain_output_dtype(const ChainProblem& p) { return dtype_info(p.dtype).half ? DType::f32 : p.dtype; }

void chain_strides(const ChainProblem& p, int64_t out[4]) {
  const int64_t* s = p.strides;
  if (s[0] != 0 || s[1] != 0 || s[2] != 0 || s[3] != 0) {
    for (int i = 0; i < 4; ++i) out[i] = s[i];
    return;
  }
  out[3] = 1;
  out[2] = p.C;
  out[1] = checked_mul(p.C, p.C, "chain.C");
  out[0] = checked_mul(p.T - 1, out[1], "chain.T");
}

HmmStrides hmm_strides(const ChainProblem& p) {
  HmmStrides out{};
  auto fill = [](const int64_t* given, int64_t* st, std::initializer_list<int64_t> extents) {
    const int n = int(extents.size());
    bool any = false;
    for (int i = 0; i < n; ++i) any = any || given[i] != 0;
    if (any) {
      for (int i = 0; i < n; ++i) st[i] = given[i];
      return;
    }
    int64_t stride = 1;
    for (int i = n - 1; i >= 0; --i) {
      st[i] = stride;
      stride = checked_mul(stride, extents.begin()[i], "chain.C");
    }
  };
  fill(p.emission_strides, out.emissions, {p.B, p.T, p.C});
  fill(p.transition_strides, out.transitions, {p.B, p.C, p.C});
  fill(p.initial_strides, out.initial, {p.B, p.C});
  if (!p.batched_transitions) out.transitions[0] = 0;
  if (!p.batched_initial) out.initial[0] = 0;
  return out;
}

} // namespace jitbmm
