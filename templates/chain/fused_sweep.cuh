// How a block of the stepped strategy's fused forms (templates/chain/fused_tiles.cuh) forms a tile's product: it
// stages the tile's rows' messages and the table's side of its columns in shared memory, a chunk of kFusedK sources
// at a time or (the resident entries) the table's side once a pass and a position's messages at once, and hands each
// thread four sources at a time of its outputs' operands; the form's own body (fused_steps.cuh, fused_viterbi.cuh)
// does the arithmetic.
#pragma once

#include "chain/fused_tiles.cuh"
#include "core/numbers.cuh"

namespace jb {
namespace fused {

// Four of a row's messages from k (`row_at` the row), unshifted (the staging shifts them), with a 16-byte load where
// the rows allow it (`vec`: C a multiple of 4): −inf but where `live`.
__device__ __forceinline__ void load_message_quad(float (&v)[4], const float* row_at, long long k, long long C,
                                                  bool vec, bool live) {
  const float* const at = row_at + k;
  if (live && vec && k < C) {
    const float4 w = __ldcg(reinterpret_cast<const float4*>(at));
    v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
  } else {
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = live && k + u < C ? __ldcg(at + u) : Num<float>::neg_inf();
  }
}

// The same for row `row` of a tile (TileRows): −inf but in rows of clean finite values (the others take no staged
// value).
__device__ __forceinline__ void load_message_part(float (&v)[4], const float* prev, const TileRows& rows, long long r0,
                                                  int row, long long k, long long C, bool vec) {
  load_message_quad(v, prev + (r0 + row) * C, k, C, vec, rows.kind[row] == kProduct && rows.clean[row] == 1);
}

// Four of a table row's columns from n (`row` the row, `in` whether it is inside the table), `fill` outside it.
__device__ __forceinline__ void load_row_part(float (&v)[4], const float* row, long long n, bool in, long long C,
                                              bool vec, float fill) {
  if (vec && in && n < C) {
    const float4 w = *reinterpret_cast<const float4*>(row + n);
    v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
  } else {
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = in && n + u < C ? row[n + u] : fill;
  }
}

// A thread's part (l of kFusedThreads) of a chunk of kFusedK sources from k0, read into registers one chunk ahead
// of the products so that their latency passes while the previous chunk's are formed. The messages: a row's 32
// values, four a thread, two rows.
__device__ __forceinline__ void load_messages(float (&ra)[2][4], const float* prev, const TileRows& rows, long long r0,
                                              long long k0, long long C, bool vec, int l) {
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int e = l + q * kFusedThreads;
    load_message_part(ra[q], prev, rows, r0, e / 8, k0 + e % 8 * 4, C, vec);
  }
}

// The table's side of the chunk (`src` [k][n], row stride C: the factors or the table itself): 32 rows of 64
// columns from c0, four a thread, four rows; `fill` outside the table.
__device__ __forceinline__ void load_columns(float (&rb)[4][4], const float* src, long long c0, long long k0,
                                             long long C, bool vec, float fill, int l) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int e = l + q * kFusedThreads;
    const long long k = k0 + e / 16;
    load_row_part(rb[q], src + k * C, c0 + e % 16 * 4, k < C, C, vec, fill);
  }
}

// The table's side of a chunk into its staged rows b_s[kFusedK][kFusedCols], as load_columns read it.
__device__ __forceinline__ void stage_columns(float (*b_s)[kFusedCols], const float (&rb)[4][4], int l) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int e = l + q * kFusedThreads, kk = e / 16, nq = e % 16;
    *reinterpret_cast<float4*>(&b_s[kk][nq * 4]) = make_float4(rb[q][0], rb[q][1], rb[q][2], rb[q][3]);
  }
}

// The messages' side of a chunk into a_s[kFusedRows][kFusedK + 4], as load_messages read it, each value v as f(v).
template <class F>
__device__ __forceinline__ void stage_messages(float (*a_s)[kFusedK + 4], const float (&ra)[2][4], int l, F f) {
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int e = l + q * kFusedThreads, row = e / 8, kq = e % 8;
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = f(row, ra[q][u]);
    *reinterpret_cast<float4*>(&a_s[row][kq * 4]) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

// The chunks a block stages for a tile's product: each group's messages and table rows.
struct Staged {
  float a[kFusedSplit][kFusedRows][kFusedK + 4];
  float b[kFusedSplit][kFusedK][kFusedCols];
};

// The resident form's shared memory (fused_resident_floats, templates/chain/params.cuh): the table's side of the
// block's one tile, [sources][kFusedCols] with source k's columns at resident_column(k, n), then its rows' messages
// of a position, [kFusedRows][sources + 4].
struct Resident {
  float* table;
  float* msg;
  int sources, pitch;
};

// Where column n of source k's row of the resident table lies: its groups of eight columns swapped by k % 4, so that
// the four sources of a tensor-core fragment (fused_mma.cuh) read their eight columns from 32 banks. Four aligned
// columns stay together.
__device__ __forceinline__ int resident_column(long long k, int n) { return n ^ (int(k & 3) << 3); }

__device__ __forceinline__ Resident resident(long long C) {
  extern __shared__ __align__(16) float resident_shared[];
  const int sources = int(fused_sources(C));
  return {resident_shared, resident_shared + sources * kFusedCols, sources, sources + 4};
}

// The resident form's first act in a pass: the table's side of the block's tile from `src` (`fill` outside the
// table), where the pass forms any product.
__device__ __forceinline__ void stage_resident_table(const ChainParams& p, const float* src, float fill) {
  const Position q = position(p, 0);
  if (p.T < 2 || blockIdx.x >= q.tiles) return;
  const Resident res = resident(q.C);
  const long long c0 = blockIdx.x % q.tiles_n * kFusedCols;
  const bool vec = (q.C & 3) == 0;
  for (int e = threadIdx.x; e < res.sources * (kFusedCols / 4); e += blockDim.x) {
    const int k = e / (kFusedCols / 4), nq = e % (kFusedCols / 4);
    float v[4];
    load_row_part(v, src + k * q.C, c0 + nq * 4, k < q.C, q.C, vec, fill);
    *reinterpret_cast<float4*>(&res.table[k * kFusedCols + resident_column(k, nq * 4)]) =
        make_float4(v[0], v[1], v[2], v[3]);
  }
}

// A position's messages of the tile's rows into the resident form's shared memory, each value v as f(row, v), for
// every thread of the block to read after it returns: blockDim.x / kFusedRows threads a row (no division by the
// sources' count), each taking every such four sources, eight loads in flight before any is staged.
template <class F>
__device__ __forceinline__ void stage_resident_messages(const Position& q, const TileRows& rows, long long r0,
                                                        const Resident& res, F f) {
  const bool vec = (q.C & 3) == 0;
  const int per_row = int(blockDim.x) / kFusedRows, row = int(threadIdx.x) / per_row, quads = res.sources / 4;
  float* const at = res.msg + row * res.pitch;
  for (int k0 = int(threadIdx.x) % per_row; k0 < quads; k0 += 8 * per_row) {
    float ra[8][4];
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (k0 + u * per_row < quads) load_message_part(ra[u], q.prev, rows, r0, row, (k0 + u * per_row) * 4LL, q.C, vec);
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (k0 + u * per_row < quads)
        *reinterpret_cast<float4*>(at + (k0 + u * per_row) * 4) =
            make_float4(f(row, ra[u][0]), f(row, ra[u][1]), f(row, ra[u][2]), f(row, ra[u][3]));
  }
  __syncthreads();
}

// The resident tile's product once its rows' messages are staged (res.msg): body(a, b, k) as sweep's, a group's
// chunks at a time, with no barrier between chunks. Returns where the groups' results may meet, as sweep does.
template <int SPLIT, class Body>
__device__ __forceinline__ float* resident_sweep(const Position& q, const Resident& res, Body body) {
  for (int k0 = q.g * kFusedK; k0 < res.sources; k0 += SPLIT * kFusedK) {
#pragma unroll
    for (int kk = 0; kk < kFusedK; kk += 4) {
      float4 a[4], b[4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
        a[r] = *reinterpret_cast<const float4*>(&res.msg[(q.ty * 4 + r) * res.pitch + k0 + kk]);
#pragma unroll
      for (int u = 0; u < 4; ++u) // source k0 + kk + u, with k0 + kk a multiple of 4
        b[u] = *reinterpret_cast<const float4*>(&res.table[(k0 + kk + u) * kFusedCols + resident_column(u, q.tx * 4)]);
      body(a, b, k0 + kk);
    }
  }
  __syncthreads(); // every read of the messages done: their space is where the results meet
  return res.msg;
}

// A tile's product, a group's chunks at a time (every kFusedSplit-th chunk of kFusedK sources): body(a, b, k) for
// each four sources from k, with the thread's four rows' messages a[r] and the four sources' table rows at its four
// columns b[u]; messages staged as f(row, value), the table's side from `src` (`fill` outside it). RESIDENT (a block
// with one tile for the whole pass, its table's side staged once: stage_resident_table) stages all the position's
// messages of the tile's rows at once and sweeps without a barrier between chunks; otherwise each chunk of both sides
// is staged in turn, the next read while this one is formed. Returns where the groups' results may meet afterwards:
// 2 × (SPLIT − 1) × kFusedRows × kFusedCols floats, free once every thread has returned.
template <bool RESIDENT, int SPLIT, class F, class Body>
__device__ __forceinline__ float* sweep(const Position& q, const TileRows& rows, long long r0, long long c0,
                                        const float* src, float fill, F f, Body body) {
  const bool vec = (q.C & 3) == 0;
  constexpr int step = SPLIT * kFusedK; // the sources of one round: a chunk a group
  if constexpr (RESIDENT) {
    const Resident res = resident(q.C);
    stage_resident_messages(q, rows, r0, res, f);
    return resident_sweep<SPLIT>(q, res, body);
  } else {
    __shared__ __align__(16) Staged st;
    float ra[2][4], rb[4][4];
    auto fetch = [&](long long k0) {
      load_messages(ra, q.prev, rows, r0, k0, q.C, vec, q.l);
      load_columns(rb, src, c0, k0, q.C, vec, fill, q.l);
    };
    fetch(q.g * kFusedK);
    for (long long k0 = 0; k0 < q.C; k0 += step) {
      stage_messages(st.a[q.g], ra, q.l, f);
      stage_columns(st.b[q.g], rb, q.l);
      __syncthreads();
      if (k0 + step < q.C) fetch(k0 + step + q.g * kFusedK);
      const int first = int(k0) + q.g * kFusedK;
#pragma unroll
      for (int kk = 0; kk < kFusedK; kk += 4) {
        float4 a[4], b[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = *reinterpret_cast<const float4*>(&st.a[q.g][q.ty * 4 + r][kk]);
#pragma unroll
        for (int u = 0; u < 4; ++u) b[u] = *reinterpret_cast<const float4*>(&st.b[q.g][kk + u][q.tx * 4]);
        body(a, b, first + kk);
      }
      __syncthreads();
    }
    return &st.b[0][0][0];
  }
}

} // namespace fused
} // namespace jb
