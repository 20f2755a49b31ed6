// The stepped strategy's own kernels (runtime/chain_stepped.cpp): every sequence advances one position at a time,
// and each step's C² terms per sequence are a product of the bmm plans (the messages of all B sequences times the
// step's table: one [B × C] · [C × C] product for an HMM's shared transitions, B products [1 × C] · [C × C]
// otherwise), so that they run on the products' kernels (tensor cores for log, with the products' guard and exact
// repair) and C has no bound of its own. What is left per position is here: the emissions ⊗-ed onto what the
// product reached, the messages made relative to their largest value (the offsets in double, as the sequential
// kernels keep them: templates/chain/params.cuh), saved, alpha, the score and the best path's end; then the path
// from the products' winning sources; and the backward's operands and the gradients the products do not give.
//
// The arithmetic is the sequential kernels' (templates/chain/sequential.cuh): a product forms the same terms (the
// relative message plus the table's entry) and max_plus's product keeps the same winner (the largest, NaN wins,
// ties to the smallest source), so the two strategies give the same Viterbi scores and paths; log's sum differs
// only by its rounding. One module serves every C (p.states): S is the inputs' storage type, T = Acc<S> the
// accumulator's; blocks of NT threads.
#pragma once

#include "chain/block_reduce.cuh"
#include "chain/hmm_backward.cuh"
#include "chain/params.cuh"
#include "chain/reductions.cuh"
#include "chain/shift.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// The value and the smallest state holding it over a block (ChainMax's order: the largest, NaN wins), in every
// thread. `scratch` and `where` hold NT / 32 values each.
template <class T, int NT> __device__ __forceinline__ T block_best(T v, int& arg, T* scratch, int* where) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    const int j = __shfl_xor_sync(0xffffffffu, arg, o);
    if (ChainMax<T>::beats(w, j, v, arg)) v = w, arg = j;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v, where[threadIdx.x >> 5] = arg;
  __syncthreads();
  v = scratch[0];
  arg = where[0];
#pragma unroll
  for (int w = 1; w < NT / 32; ++w)
    if (ChainMax<T>::beats(scratch[w], where[w], v, arg)) v = scratch[w], arg = where[w];
  return v;
}

// What the product reached at state c of sequence b: its one result, or for log split in parts the ⊕ of theirs, as
// ChainLog adds a group's terms (NaN anywhere gives NaN, a +inf part without NaN +inf, all −inf −inf). The parts are
// loaded together, each once.
template <class T, bool LOG> __device__ __forceinline__ T reached_at(const ChainParams& p, long long b, long long c) {
  const T* const prod = static_cast<const T*>(p.prod) + b * p.states + c;
  if (!LOG || p.parts <= 1) return prod[0];
  const long long part = p.B * p.states;
  T v[kMaxStepParts];
#pragma unroll
  for (int i = 0; i < kMaxStepParts; ++i) v[i] = i < p.parts ? prod[i * part] : Num<T>::neg_inf();
  T m = v[0];
#pragma unroll
  for (int i = 1; i < kMaxStepParts; ++i) m = Num<T>::max(m, v[i]);
  if (!(m > Num<T>::neg_inf() && m < Num<T>::inf())) return m;
  T s = 0;
#pragma unroll
  for (int i = 0; i < kMaxStepParts; ++i) s += Num<T>::exp2((v[i] - m) * Num<T>::log2e()); // −inf pads add 0
  return m + Num<T>::log2(s) * Num<T>::ln2();
}

// The states a thread of a position's block keeps in registers between making its messages and writing them
// relative; past them (C > NT · kKeptStates) the messages go through msg and are read back.
constexpr int kKeptStates = 8;

// Position p.t of every sequence (a block per sequence, grid-strided): the forward's (beta = 0) messages at t are
// the first ones (t = 0: initial ⊗ emissions, or 0 for the CRF form) or prod ⊗ emissions[t]; the backward's
// (beta = 1) start at the sequence's last position (its emissions, or 0) and are prod ⊗ emissions[t] before it
// (they carry the position's emission, as the sequential kernels' do). Past a sequence's length: −inf, offset 0,
// path −1. At the last position the forward writes the score and the path's last state.
template <class S, bool LOG, bool HMM, int NT> __device__ __forceinline__ void step_position(const ChainParams& p) {
  using T = typename Acc<S>::type;
  __shared__ T scratch[NT / 32];
  __shared__ int where[NT / 32];
  const long long C = p.states, t = p.t;
  const bool beta = p.beta != 0;
  T* const rel_out = static_cast<T*>(beta ? p.beta_rel : p.rel);
  double* const offset_out = beta ? p.beta_offset : p.offset;
  T* const alpha = beta ? nullptr : static_cast<T*>(p.alpha);
  for (long long b = blockIdx.x; b < p.B; b += gridDim.x) {
    bool bad;
    const long long L = chain_length(p, b, bad), at = b * p.T + t;
    T* const msg = static_cast<T*>(p.msg) + b * p.msg_row;
    if (t >= L) {
      for (long long c = threadIdx.x; c < C; c += NT) {
        msg[c] = Num<T>::neg_inf();
        if (rel_out) rel_out[at * C + c] = Num<T>::neg_inf();
        if (alpha) alpha[at * C + c] = Num<T>::neg_inf();
      }
      if (threadIdx.x == 0 && rel_out) offset_out[at] = 0;
      if (threadIdx.x == 0 && !beta && p.path) p.path[at] = -1;
      continue;
    }
    const bool start = beta ? t == L - 1 : t == 0;
    const S* const em = static_cast<const S*>(p.emissions) + b * p.e_b + t * p.e_t;
    const double before = start ? 0.0 : p.running[b];
    T best = Num<T>::neg_inf();
    // State c's message before the shift (NaN for a bad sequence), its maximum taken.
    auto make = [&](long long c) {
      const T e = HMM ? to_acc(em[c * p.e_c]) : T(0);
      T v = e;
      if (!start)
        v = reached_at<T, LOG>(p, b, c) + e;
      else if (HMM && !beta)
        v = to_acc(static_cast<const S*>(p.initial)[b * p.i_b + c * p.i_c]) + e;
      else if (!HMM)
        v = T(0);
      best = Num<T>::max(best, v);
      return bad ? Num<T>::nan() : v;
    };
    T kept[kKeptStates];
#pragma unroll
    for (int i = 0; i < kKeptStates; ++i) {
      const long long c = threadIdx.x + i * NT;
      if (c < C) kept[i] = make(c);
    }
    for (long long c = threadIdx.x + kKeptStates * NT; c < C; c += NT) msg[c] = make(c);
    const T shift = finite_or_zero(block_max<T, NT>(best, scratch));
    const double offset = before + double(shift);
    T top = Num<T>::neg_inf();
    int arg = -1;
    auto put = [&](long long c, T v) {
      const T rel = v - shift;
      msg[c] = rel;
      if (rel_out) rel_out[at * C + c] = rel;
      if (alpha) alpha[at * C + c] = T(offset + double(rel));
      if (!LOG && ChainMax<T>::beats(rel, int(c), top, arg)) top = rel, arg = int(c);
      if (LOG) top = Num<T>::max(top, rel);
    };
#pragma unroll
    for (int i = 0; i < kKeptStates; ++i) {
      const long long c = threadIdx.x + i * NT;
      if (c < C) put(c, kept[i]);
    }
    for (long long c = threadIdx.x + kKeptStates * NT; c < C; c += NT) put(c, msg[c]);
    if (threadIdx.x == 0) {
      p.running[b] = offset;
      if (rel_out) offset_out[at] = offset;
    }
    if (beta || t != L - 1) continue;
    // The score: ⊕ of the last messages, their offset added where it is finite.
    T v;
    if (LOG) {
      const T m = block_max<T, NT>(top, scratch);
      const bool finite = m > Num<T>::neg_inf() && m < Num<T>::inf();
      T s = 0;
      if (finite)
        for (long long c = threadIdx.x; c < C; c += NT) s += Num<T>::exp2((msg[c] - m) * Num<T>::log2e());
      s = block_sum<T, NT>(s, scratch);
      v = finite ? m + Num<T>::log2(s) * Num<T>::ln2() : m;
    } else {
      v = block_best<T, NT>(top, arg, scratch, where);
    }
    if (threadIdx.x == 0) {
      const double z = v > Num<T>::neg_inf() && v < Num<T>::inf() ? offset + double(v) : double(v);
      static_cast<T*>(p.score)[b] = T(z);
      if (p.logz) p.logz[b] = z;
      if (!LOG && p.path) p.path[at] = v == Num<T>::neg_inf() || bad ? -1 : arg;
    }
    // An HMM sequence whose score is +inf or NaN has no marginals (its gradients are NaN or, with grad_score 0, 0),
    // and its backward reads none of its messages but the transitions' gradient's product, which reads every
    // sequence's: they become −inf, so that it takes nothing from them where its operand is −inf (NaN ⊗ −inf would
    // be NaN). The CRF form's backward reads them as the sequential kernels' does.
    if (LOG && HMM && rel_out && !(v < Num<T>::inf()))
      for (long long i = threadIdx.x; i < L * C; i += NT) rel_out[b * p.T * C + i] = Num<T>::neg_inf();
  }
}

// The best path from its last state back, a thread per sequence: the state before position t is the source that
// won the product reaching t (argmax [T][B][C]; the sequential kernels' back-pointers).
__device__ __forceinline__ void step_path(const ChainParams& p) {
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < p.B;
       b += (long long)gridDim.x * blockDim.x) {
    bool bad;
    const long long L = chain_length(p, b, bad);
    int state = p.path[b * p.T + L - 1];
    for (long long t = L - 1; t > 0; --t) {
      if (state >= 0) state = p.argmax[(t * p.B + b) * p.states + state];
      p.path[b * p.T + t - 1] = state;
    }
  }
}

// A table copied into the accumulator type, contiguous: operand[g][i][j] = potentials[g·s_b + i·s_c + j·s_p] for
// `slices` tables of C × C (the caller sets the strides: swapping s_c and s_p transposes). Grid-strided.
template <class S> __device__ __forceinline__ void step_widen(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long C = p.states, n = p.slices * C * C;
  const S* const src = static_cast<const S*>(p.potentials);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long g = i / (C * C), r = i / C % C, q = i % C;
    static_cast<T*>(p.operand)[i] = to_acc(src[g * p.s_b + r * p.s_c + q * p.s_p]);
  }
}

// The signs of the log backward's two left operands of the transitions' gradient (ChainParams::signs), from
// grad_score: the first operand takes the positive parts where any grad_score is positive, else the negative ones;
// the second the negative parts where grad_score has both signs, else none (0: its product does not run, as with a
// grad_score of all ones, or of all −1/B). A NaN share goes into every operand formed. One block.
template <class S> __device__ __forceinline__ void step_edge_signs(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const T* const g = static_cast<const T*>(p.grad_score);
  bool positive = false, negative = false;
  for (long long b = threadIdx.x; b < p.B; b += blockDim.x) positive |= g[b] > T(0), negative |= g[b] < T(0);
  positive = __syncthreads_or(positive);
  negative = __syncthreads_or(negative);
  if (threadIdx.x == 0) {
    p.signs[0] = positive || !negative ? 1 : -1;
    p.signs[1] = positive && negative ? -1 : 0;
  }
}

// The log backward's left operand of the transitions' gradient, operand [B][T][C], along one row (b, t): the log of
// sequence b's share of step t → t + 1 without its two messages' relative values and the transition, beta_rel
// [t + 1][c] + the offsets − score + log of the part of grad_score[b] of the sign `sign` (−inf where that part is 0,
// at t ≥ the length − 1, and for a sequence sending nothing back; NaN where its gradient is NaN). The product of
// this with the saved rel over (b, t) sums every step's exp(alpha_t[p] + beta_{t+1}[c] − score) · grad_score.
template <class T> struct EdgeRow {
  bool nan = false, sends = false;
  T k = 0, log_part = 0;
  __device__ __forceinline__ EdgeRow(const ChainParams& p, const HmmSequence<T, true>& s, long long row, long long t,
                                     int sign) {
    if (t < 0) return; // no such row: nothing
    nan = s.mode == 2 && t + 1 < p.T;
    if (s.mode == 1 && t + 1 < s.L) {
      const T part = sign > 0 ? s.g : -s.g;
      if (part != part) {
        nan = true; // a NaN grad_score makes the sum NaN, as it makes the emissions' gradient
      } else if (part > T(0)) {
        sends = true;
        k = T(p.offset[row] + p.beta_offset[row + 1] - s.z);
        log_part = Num<T>::log2(part) * Num<T>::ln2();
      }
    }
  }
  // The operand at a state whose next position's relative backward message is `next` (read only where it sends).
  __device__ __forceinline__ T operator()(T next) const {
    return nan ? Num<T>::nan() : sends ? (next + k) + log_part : Num<T>::neg_inf();
  }
};

// The operand of sign signs[p.edge] (EdgeRow), a warp a row (b, t) (hmm_row_threads); nothing where that sign is 0.
template <class S> __device__ __forceinline__ void step_edge_operand(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const int sign = p.signs[p.edge];
  if (sign == 0) return;
  const long long C = p.states, rows = p.B * p.T, warps = (long long)gridDim.x * blockDim.x / kHmmLanes;
  const int lane = int(threadIdx.x % kHmmLanes);
  for (long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kHmmLanes; row < rows; row += warps) {
    const long long b = row / p.T, t = row % p.T;
    const EdgeRow<T> edge(p, HmmSequence<T, true>(p, b), row, t, sign);
    T* const out = static_cast<T*>(p.operand) + row * C;
    const T* const r = static_cast<const T*>(p.beta_rel) + (row + 1) * C; // inside beta_rel wherever it sends
#pragma unroll 4
    for (long long c = lane; c < C; c += kHmmLanes) out[c] = edge(edge.sends ? r[c] : T(0));
  }
}

// The log backward's two passes over [B][T][C] in one where both are asked, reading each backward message once: row
// (b, t)'s state marginals (grad_emissions, hmm_nodes') and the operand of sign signs[0] (step_edge_operand's, edge
// 0) of row (b, t − 1), which reads the same messages, and at t = T − 1 of row (b, t) too: −inf, as nothing is sent
// back from the last position. A warp a row (hmm_row_threads), grid-strided, in rounds of kHmmRowRound states a lane.
template <class S> __device__ __forceinline__ void step_nodes_operand(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const int sign = p.signs[0]; // never 0 (step_edge_signs)
  const long long C = p.states, rows = p.B * p.T, warps = (long long)gridDim.x * blockDim.x / kHmmLanes;
  const int lane = int(threadIdx.x % kHmmLanes);
  for (long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kHmmLanes; row < rows; row += warps) {
    const long long b = row / p.T, t = row % p.T;
    const HmmSequence<T, true> s(p, b);
    const HmmRow<T, true> r(p, s, b, t);
    const EdgeRow<T> before(p, s, row - 1, t - 1, sign);
    const S* const em = static_cast<const S*>(p.emissions) + b * p.e_b + t * p.e_t;
    const T* const a = static_cast<const T*>(p.rel) + row * C;
    const T* const bt = static_cast<const T*>(p.beta_rel) + row * C;
    S* const grad = static_cast<S*>(p.grad_emissions) + row * C;
    T* const out = static_cast<T*>(p.operand) + row * C;
    for (long long c0 = lane; c0 < C; c0 += kHmmRowRound * kHmmLanes) {
      T e[kHmmRowRound], x[kHmmRowRound], beta[kHmmRowRound];
#pragma unroll
      for (int j = 0; j < kHmmRowRound; ++j) {
        const long long c = c0 + j * kHmmLanes < C ? c0 + j * kHmmLanes : C - 1;
        e[j] = to_acc(em[c * p.e_c]), x[j] = a[c], beta[j] = bt[c];
      }
#pragma unroll
      for (int j = 0; j < kHmmRowRound; ++j) {
        const long long c = c0 + j * kHmmLanes;
        if (c >= C) break;
        grad[c] = from_acc<S>(r.of(hmm_log_node(s, r, e[j], x[j], beta[j])));
        if (t > 0) out[c - C] = before(beta[j]);
        if (t + 1 == p.T) out[c] = Num<T>::neg_inf();
      }
    }
  }
}

// log ⊕ of x over n values `stride` apart: exact to the accumulator type, NaN anywhere NaN.
template <class T> __device__ __forceinline__ T log_sum(const T* x, long long n, long long stride) {
  T m = Num<T>::neg_inf();
  for (long long k = 0; k < n; ++k) m = Num<T>::max(m, x[k * stride]);
  if (!(m > Num<T>::neg_inf() && m < Num<T>::inf())) return m;
  T s = 0;
  for (long long k = 0; k < n; ++k) s += Num<T>::exp2((x[k * stride] - m) * Num<T>::log2e());
  return m + Num<T>::log2(s) * Num<T>::ln2();
}

// The transitions' gradient from the products of the edge operands (products [2][slices][groups][C][C], the slices
// being ranges of sequences summed here): the sum over the operands formed of their sign · exp(transitions[c][q] +
// their part), written in S. An operand of sign 0 was not formed, nor its product run: its part is not read.
// Grid-strided over groups · C².
template <class S> __device__ __forceinline__ void step_edge_finish(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long C = p.states, groups = p.batched_transitions ? p.B : 1, n = groups * C * C;
  const T* const parts = static_cast<const T*>(p.products);
  const long long part = p.slices * n;
  const int signs[2] = {p.signs[0], p.signs[1]};
  const S* const trans = static_cast<const S*>(p.potentials);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long g = i / (C * C), r = i / C % C, q = i % C;
    const T tr = to_acc(trans[g * p.s_b + r * p.s_c + q * p.s_p]);
    T grad = 0;
    for (int e = 0; e < 2; ++e) {
      if (signs[e] == 0) continue;
      const T sum = log_sum(parts + e * part + i, p.slices, n);
      // A part no step reached adds nothing, whatever the transition (+inf ⊗ −inf would be NaN).
      const T share = sum == Num<T>::neg_inf() ? T(0) : Num<T>::exp2((tr + sum) * Num<T>::log2e());
      grad += signs[e] > 0 ? share : -share;
    }
    static_cast<S*>(p.grad)[i] = from_acc<S>(grad);
  }
}

// max_plus's transitions' gradient: grad_score on each step of the best path, summed in the order of the steps. A
// warp per row c of a group's table (grid-strided), accumulating in operand [groups][C][C] (the accumulator type)
// the steps that reach c; a sequence whose gradient is NaN adds NaN to every entry. "_cast" writes it in S.
template <class S> __device__ __forceinline__ void step_path_edges(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long C = p.states, groups = p.batched_transitions ? p.B : 1;
  const long long steps = p.batched_transitions ? p.T - 1 : p.B * (p.T - 1);
  const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
  for (long long row = blockIdx.x * (long long)warps + threadIdx.x / 32; row < groups * C;
       row += (long long)gridDim.x * warps) {
    const long long group = row / C, c = row % C;
    T* const acc = static_cast<T*>(p.operand) + row * C;
    for (long long q = lane; q < C; q += 32) acc[q] = T(0);
    __syncwarp();
    for (long long i0 = 0; i0 < steps; i0 += 32) {
      const long long i = i0 + lane;
      int from = -1, nan = 0;
      T g = 0;
      if (i < steps) {
        const long long b = p.batched_transitions ? group : i / (p.T - 1),
                        t = p.batched_transitions ? i : i % (p.T - 1);
        const HmmSequence<T, false> s(p, b);
        g = s.g;
        nan = s.mode == 2;
        if (s.mode == 1 && t + 1 < s.L && p.path[b * p.T + t + 1] == c) {
          const int f = p.path[b * p.T + t];
          from = f < C ? f : -1; // a state outside the chain's (a path not the forward's) is no edge
        }
      }
      for (unsigned m = __ballot_sync(0xffffffffu, from >= 0 || nan); m != 0; m &= m - 1) {
        const int j = __ffs(m) - 1;
        const int f = __shfl_sync(0xffffffffu, from, j), n = __shfl_sync(0xffffffffu, nan, j);
        const T gj = __shfl_sync(0xffffffffu, g, j);
        if (n)
          for (long long q = lane; q < C; q += 32) acc[q] += Num<T>::nan();
        else if (lane == 0)
          acc[f] += gj;
        __syncwarp();
      }
    }
  }
}

// operand (the accumulator type) into grad (S), groups · C² elements. Grid-strided.
template <class S> __device__ __forceinline__ void step_cast(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long n = (p.batched_transitions ? p.B : 1) * p.states * p.states;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    static_cast<S*>(p.grad)[i] = from_acc<S>(static_cast<const T*>(p.operand)[i]);
}

// The CRF form's backward, an element per thread (grid-strided over B · (T − 1) · C²): log's edge marginal
// grad_score · exp(alpha_t[q] + potentials[t][c][q] + beta_{t+1}[c] − score) from the saved messages, max_plus's
// best path's indicator times grad_score; 0 past a length and for a sequence sending nothing back, NaN for a bad
// length (the sequential kernels' chain_marginals and chain_path_backward, for any C).
template <class S, bool LOG> __device__ __forceinline__ void step_marginals(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long C = p.states, n = p.B * (p.T - 1) * C * C;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long bt = i / (C * C), b = bt / (p.T - 1), t = bt % (p.T - 1), c = i / C % C, q = i % C;
    bool bad;
    const long long L = chain_length(p, b, bad);
    const T g = static_cast<const T*>(p.grad_score)[b];
    T v;
    if (LOG) {
      const double z = p.logz[b];
      const bool none = g == T(0) || z == double(Num<T>::neg_inf());
      if (none || bad || t + 1 >= L) {
        v = bad && !none ? Num<T>::nan() : T(0);
      } else {
        const T k = T(p.offset[b * p.T + t] + p.beta_offset[b * p.T + t + 1] - z);
        const T a = static_cast<const T*>(p.rel)[(b * p.T + t) * C + q];
        const T r = static_cast<const T*>(p.beta_rel)[(b * p.T + t + 1) * C + c];
        const T y = to_acc(static_cast<const S*>(p.potentials)[b * p.s_b + t * p.s_t + c * p.s_c + q * p.s_p]);
        v = g * Num<T>::exp2(((a + k) + (y + r)) * Num<T>::log2e());
      }
    } else {
      const bool hit = t + 1 < L && p.path[b * p.T + t + 1] == c && p.path[b * p.T + t] == q;
      v = bad && g != T(0) ? Num<T>::nan() : hit ? g : T(0);
    }
    static_cast<S*>(p.grad)[i] = from_acc<S>(v);
  }
}

} // namespace jb
