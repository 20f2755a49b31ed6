// The linear chain with one block per sequence, sequential along T: the messages stay in shared memory, and each
// step's C² terms are spread over the block, G lanes of a warp per target state combined by shuffles. Potentials do
// not depend on the messages, so a step's are loaded before the previous step's reduction (PREFETCH) where they fit
// in registers. The messages are kept near 0 with their offsets in double (templates/chain/params.cuh).
#pragma once

#include "chain/params.cuh"
#include "core/numbers.cuh"
#include "core/semirings.cuh"

namespace jb {

// The ⊕ of x over a group of G lanes (xor-adjacent, G a power of two ≤ 32): the result in every lane of the
// group. Every lane of the warp takes part.
template <int G, class T, class Op> __device__ __forceinline__ T group_reduce(T x, Op op) {
#pragma unroll
  for (int o = 1; o < G; o <<= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Each step's reduction of one target state's C terms, N per lane over a group of G lanes: lane l holds the terms
// of states first, first + G, ... (first = l's index in the group; states ≥ C hold −inf). The result reaches every
// lane of the group, with the state that won (selecting reductions) in `arg`.
//
// log: log Σ exp, exact to the dtype: NaN anywhere gives NaN, a +inf term (without NaN) +inf, all −inf −inf.
template <class T> struct ChainLog {
  template <int G, int N> static __device__ __forceinline__ T reduce(const T (&x)[N], int, int& arg) {
    T m = x[0];
#pragma unroll
    for (int k = 1; k < N; ++k) m = Num<T>::max(m, x[k]);
    m = group_reduce<G>(m, [](T a, T b) { return Num<T>::max(a, b); });
    const bool finite = m > Num<T>::neg_inf() && m < Num<T>::inf();
    const T shift = finite ? m : T(0);
    T s = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) s += Num<T>::exp2((x[k] - shift) * Num<T>::log2e());
    s = group_reduce<G>(s, [](T a, T b) { return a + b; });
    arg = -1;
    return finite ? m + Num<T>::log2(s) * Num<T>::ln2() : m;
  }
};

// max_plus: the maximum and the smallest state reaching it; NaN wins (the smallest state holding NaN), as the bmm
// argmax does.
template <class T> struct ChainMax {
  static __device__ __forceinline__ bool beats(T a, int i, T b, int j) {
    if (a != a) return b == b || i < j;
    return a > b || (a == b && i < j);
  }
  template <int G, int N> static __device__ __forceinline__ T reduce(const T (&x)[N], int first, int& arg) {
    T v = x[0];
    int i = first;
#pragma unroll
    for (int k = 1; k < N; ++k)
      if (beats(x[k], first + k * G, v, i)) v = x[k], i = first + k * G;
#pragma unroll
    for (int o = 1; o < G; o <<= 1) {
      const T w = __shfl_xor_sync(0xffffffffu, v, o);
      const int j = __shfl_xor_sync(0xffffffffu, i, o);
      if (beats(w, j, v, i)) v = w, i = j;
    }
    arg = i;
    return v;
  }
};

// Sequence b's length; a length outside [1, T] (the host cannot check device memory without waiting) is `bad`: the
// sequence's score and gradients are NaN, its path −1.
__device__ __forceinline__ long long chain_length(const ChainParams& p, long long b, bool& bad) {
  const long long n = p.lengths ? p.lengths[b] : p.T;
  bad = n < 1 || n > p.T;
  return bad ? 1 : n;
}

template <class T> __device__ __forceinline__ T finite_or_zero(T x) {
  return x > Num<T>::neg_inf() && x < Num<T>::inf() ? x : T(0);
}

// The largest of the per-warp maxima a step left (its shift; 0 where it is not finite: all −inf, +inf or NaN keep
// their values unshifted).
template <class T, int WARPS> __device__ __forceinline__ T step_shift(const T* warp_max) {
  T o = warp_max[0];
#pragma unroll
  for (int w = 1; w < WARPS; ++w) o = Num<T>::max(o, warp_max[w]);
  return finite_or_zero(o);
}

// The forward: score[b], and what the caller asked for of saved (rel, offset, logz), alpha and the best path.
// One block of NT threads per sequence; C states; G lanes per target state.
template <class T, class Op, int C, int NT, int G, bool PREFETCH>
__device__ __forceinline__ void chain_forward(const ChainParams& p) {
  constexpr int GROUPS = NT / G, ROUNDS = (C + GROUPS - 1) / GROUPS, N = (C + G - 1) / G, WARPS = NT / 32;
  static_assert(NT % 32 == 0 && G <= 32 && 32 % G == 0, "a group is a power-of-two part of a warp");
  __shared__ T msg[2][C];
  __shared__ T warp_max[2][WARPS];
  const int tid = threadIdx.x, lane = tid % G, group = tid / G;
  const long long b = blockIdx.x, T_ = p.T;
  bool bad;
  const long long L = chain_length(p, b, bad);
  const T* pot = static_cast<const T*>(p.potentials) + b * p.s_b;

  for (int c = tid; c < C; c += NT) msg[0][c] = bad ? Num<T>::nan() : T(0);
  if (tid < WARPS) warp_max[0][tid] = T(0);
  __syncthreads();

  // The potentials of step t (positions t → t + 1) that round r of this thread reduces.
  auto load = [&](long long t, int r, T(&w)[N]) {
    const int c = group + r * GROUPS;
    const T* row = pot + t * p.s_t + (long long)(c < C ? c : 0) * p.s_c;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int q = lane + k * G;
      w[k] = c < C && q < C ? row[(long long)q * p.s_p] : Num<T>::neg_inf();
    }
  };
  // Position t's messages, now msg[from] − shift with the offset `offset`, to saved and alpha.
  auto store_position = [&](long long t, int from, T shift, double offset) {
    if (p.rel && tid == 0) p.offset[b * T_ + t] = offset;
    for (int c = tid; c < C; c += NT) {
      const T rel = msg[from][c] - shift;
      if (p.rel) static_cast<T*>(p.rel)[(b * T_ + t) * C + c] = rel;
      if (p.alpha) static_cast<T*>(p.alpha)[(b * T_ + t) * C + c] = T(offset + double(rel));
    }
  };

  // Step t (positions t → t + 1) reduces the potentials in `use` (with PREFETCH; else it loads them round by
  // round) and loads step t + 1's into `fill`. The loop runs two steps an iteration with the buffers swapped, so
  // no copy waits for the loads: they land while the block synchronises and the next step starts.
  using Buffer = T[PREFETCH ? ROUNDS : 1][N];
  double offset = 0;
  auto step = [&](long long t, Buffer& use, Buffer& fill) {
    const int from = int(t & 1), to = from ^ 1;
    const T shift = step_shift<T, WARPS>(warp_max[from]);
    offset += double(shift);
    store_position(t, from, shift, offset);
    T a[N];
#pragma unroll
    for (int k = 0; k < N; ++k) a[k] = lane + k * G < C ? msg[from][lane + k * G] - shift : Num<T>::neg_inf();
    if (PREFETCH && t + 2 < L)
#pragma unroll
      for (int r = 0; r < ROUNDS; ++r) load(t + 1, r, fill[r]);
    T best = Num<T>::neg_inf();
    // Without PREFETCH every round loads its own terms: two at a time overlap their loads without the registers
    // of every round at once.
    constexpr int kRoundUnroll = PREFETCH ? ROUNDS : 2;
#pragma unroll kRoundUnroll
    for (int r = 0; r < ROUNDS; ++r) {
      T x[N];
      if (PREFETCH) {
#pragma unroll
        for (int k = 0; k < N; ++k) x[k] = use[r][k];
      } else {
        load(t, r, x);
      }
#pragma unroll
      for (int k = 0; k < N; ++k) x[k] += a[k];
      int arg;
      const T v = Op::template reduce<G>(x, lane, arg);
      const int c = group + r * GROUPS;
      if (c < C) {
        if (lane == 0) {
          msg[to][c] = v;
          if (p.back) p.back[(b * T_ + t + 1) * C + c] = (unsigned short)arg;
        }
        best = Num<T>::max(best, v);
      }
    }
    best = group_reduce<32>(best, [](T x, T y) { return Num<T>::max(x, y); });
    if (tid % 32 == 0) warp_max[to][tid / 32] = best;
    __syncthreads();
  };
  Buffer even, odd;
  if (PREFETCH && L > 1)
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) load(0, r, even[r]);
  for (long long t = 0; t + 1 < L; t += 2) {
    step(t, even, odd);
    if (t + 2 < L) step(t + 1, odd, even);
  }

  const int last = int((L - 1) & 1);
  const T shift = step_shift<T, WARPS>(warp_max[last]);
  offset += double(shift);
  store_position(L - 1, last, shift, offset);
  if (tid < 32) {
    constexpr int N32 = (C + 31) / 32;
    T x[N32];
#pragma unroll
    for (int k = 0; k < N32; ++k) x[k] = tid + 32 * k < C ? msg[last][tid + 32 * k] - shift : Num<T>::neg_inf();
    int arg;
    const T v = Op::template reduce<32>(x, tid, arg);
    const double z = v > Num<T>::neg_inf() && v < Num<T>::inf() ? offset + double(v) : double(v);
    if (tid == 0) {
      static_cast<T*>(p.score)[b] = T(z);
      if (p.rel) p.logz[b] = z;
      if (p.path) {
        // A sequence without a path (score −inf) gets −1 throughout; otherwise the back-pointers from its end.
        int state = v == Num<T>::neg_inf() || bad ? -1 : arg;
        p.path[b * T_ + L - 1] = state;
        for (long long t = L - 1; t > 0; --t) {
          if (state >= 0) state = p.back[(b * T_ + t) * C + state];
          p.path[b * T_ + t - 1] = state;
        }
      }
    }
  }
  // Past the sequence's length: no message, no state (saved too, so that its every byte is determined).
  for (long long i = (L * C) + tid; i < T_ * C; i += NT) {
    if (p.alpha) static_cast<T*>(p.alpha)[b * T_ * C + i] = Num<T>::neg_inf();
    if (p.rel) static_cast<T*>(p.rel)[b * T_ * C + i] = Num<T>::neg_inf();
  }
  if (p.rel)
    for (long long t = L + tid; t < T_; t += NT) p.offset[b * T_ + t] = 0;
  if (p.path)
    for (long long t = L + tid; t < T_; t += NT) p.path[b * T_ + t] = -1;
}

// The log backward: the edge marginals times grad_score[b], from the forward's saved messages and the backward
// messages beta (kept like alpha: near 0, their offset in double) computed here from the sequence's end. One block
// of NT threads per sequence, R = NT / C threads per state p, each summing the rows c ≡ its rank (mod R).
template <class T, int C, int NT> __device__ __forceinline__ void chain_backward(const ChainParams& p) {
  constexpr int R = NT / C, WARPS = NT / 32;
  static_assert(R >= 1 && NT % 32 == 0, "a thread per state at least");
  using State = typename LogSemiring<T>::State;
  __shared__ T msg[2][C];
  __shared__ State part[R][C];
  __shared__ T warp_max[2][WARPS];
  const int tid = threadIdx.x, r = tid / C, q = tid % C;
  const bool active = r < R;
  const long long b = blockIdx.x, T_ = p.T;
  bool bad;
  const long long L = chain_length(p, b, bad);
  const T* pot = static_cast<const T*>(p.potentials) + b * p.s_b;
  T* grad = static_cast<T*>(p.grad) + b * (T_ - 1) * C * C;
  const T g = static_cast<const T*>(p.grad_score)[b];
  const double z = p.logz[b];

  // Steps past the length, and every step of a sequence that sends nothing back (G = 0, score −inf), are 0.
  const bool none = g == T(0) || z == double(Num<T>::neg_inf());
  for (long long i = ((none || bad ? 0 : L - 1) * C * C) + tid; i < (T_ - 1) * C * C; i += NT)
    grad[i] = bad && !none ? Num<T>::nan() : T(0);
  if (none || bad || L < 2) return;

  for (int c = tid; c < C; c += NT) msg[0][c] = T(0);
  if (tid < WARPS) warp_max[0][tid] = T(0);
  // A step's potentials, alpha_t[q] and its offset do not depend on beta: with PREFETCH (when twice a thread's rows
  // fit in a quarter of its registers) they are loaded one step ahead, so the step's reduction never waits on memory.
  constexpr int ROWS = (C + R - 1) / R;
  constexpr bool PREFETCH = ROWS * int(sizeof(T)) <= 65536 / NT;
  struct Ahead {
    T w[PREFETCH ? ROWS : 1];
    T a;
    double offset;
  };
  auto load = [&](long long t, Ahead& x) {
    const T* step = pot + t * p.s_t + (long long)q * p.s_p;
#pragma unroll
    for (int j = 0; j < (PREFETCH ? ROWS : 0); ++j) {
      const int c = r + j * R;
      x.w[j] = active && c < C ? step[(long long)c * p.s_c] : Num<T>::neg_inf();
    }
    x.a = active ? static_cast<const T*>(p.rel)[(b * T_ + t) * C + q] : T(0);
    x.offset = p.offset[b * T_ + t];
  };
  Ahead even, odd;
  load(L - 2, even);
  __syncthreads();
  double offset = 0;
  // Step t (beta_{t+1} → beta_t) with `now` loaded a step before; it loads step t − 1 into `fill`. Two steps an
  // iteration with the buffers swapped, as in the forward.
  auto step = [&](long long t, long long i, const Ahead& now, Ahead& fill) {
    const int from = int(i & 1), to = from ^ 1;
    if (t > 0) load(t - 1, fill);
    const T shift = step_shift<T, WARPS>(warp_max[from]);
    offset += double(shift);
    // exp(alpha_t[q] + pot + beta_{t+1}[c] − z), each message split into its small part and its offset.
    const T a = now.a + T(now.offset + offset - z);
    if (active) {
      T* out = grad + (t * C) * C + q;
      State st = LogSemiring<T>::init();
      auto row = [&](int c, T potential) {
        const T y = potential + (msg[from][c] - shift);
        LogSemiring<T>::push(st, y);
        out[c * C] = g * Num<T>::exp2((a + y) * Num<T>::log2e());
      };
      if (PREFETCH) {
#pragma unroll
        for (int j = 0; j < (PREFETCH ? ROWS : 0); ++j)
          if (r + j * R < C) row(r + j * R, now.w[j]);
      } else {
        const T* step_pot = pot + t * p.s_t + (long long)q * p.s_p;
        constexpr int kUnroll = sizeof(T) == 8 ? 1 : 4; // f64's exp takes registers that more copies would spill
#pragma unroll kUnroll
        for (int c = r; c < C; c += R) row(c, step_pot[(long long)c * p.s_c]);
      }
      part[r][q] = st;
    }
    __syncthreads();
    T v = Num<T>::neg_inf();
    if (tid < C) {
      State st = part[0][q];
#pragma unroll
      for (int j = 1; j < R; ++j) LogSemiring<T>::combine(st, part[j][q]);
      v = LogSemiring<T>::finalize(st);
      msg[to][q] = v;
    }
    v = group_reduce<32>(v, [](T x, T y) { return Num<T>::max(x, y); });
    if (tid % 32 == 0) warp_max[to][tid / 32] = v;
    __syncthreads();
  };
  for (long long t = L - 2, i = 0; t >= 0; t -= 2, i += 2) {
    step(t, i, even, odd);
    if (t > 0) step(t - 1, i + 1, odd, even);
  }
}

// The max_plus backward: grad_score[b] on each edge of the forward's best path, 0 elsewhere. One block of NT
// threads per (b, t) step, grid-strided.
template <class T, int C, int NT> __device__ __forceinline__ void chain_path_backward(const ChainParams& p) {
  const long long steps = p.B * (p.T - 1);
  for (long long bt = blockIdx.x; bt < steps; bt += gridDim.x) {
    const long long b = bt / (p.T - 1), t = bt % (p.T - 1);
    bool bad;
    const long long L = chain_length(p, b, bad);
    const int to = t + 1 < L ? p.path[b * p.T + t + 1] : -1, from = t + 1 < L ? p.path[b * p.T + t] : -1;
    const long long hit = to >= 0 && from >= 0 ? (long long)to * C + from : -1;
    const T g = static_cast<const T*>(p.grad_score)[b];
    T* grad = static_cast<T*>(p.grad) + bt * C * C;
    for (long long e = threadIdx.x; e < (long long)C * C; e += NT)
      grad[e] = bad && g != T(0) ? Num<T>::nan() : e == hit ? g : T(0);
  }
}

} // namespace jb
