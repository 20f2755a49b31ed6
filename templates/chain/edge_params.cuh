// The shape of an "_edges" block (templates/chain/hmm_edges.cuh): how its threads hold their tile of the transitions'
// gradient, how many steps it stages at a time, and the shared memory that takes. Plain C++ with no device code, so
// the host (generator/chain_source.cpp, runtime/hmm_sums.cpp) sizes the blocks and their grid from this same
// file.
#pragma once

#include "core/host_device.cuh"

namespace jb {

JB_HD constexpr int edge_pow2_at_most(int x) { return x >= 16 ? 16 : x >= 8 ? 8 : x >= 4 ? 4 : x >= 2 ? 2 : 1; }

// How an "_edges" block sums its tile: `narrow`, about 2048 elements, eight a thread; `wide`, about 16384, 32 a thread
// (a step's factors formed once for four times the sums); `mma`, 32 a thread in tensor-core fragments, the factors'
// products on the tensor cores from sm_80 on (a TF32 split, three products a term).
enum EdgeKind : int { kEdgeNarrow = 0, kEdgeWide = 1, kEdgeMma = 2 };

// A block of NT threads and its tile of ROWS rows × C sources, in an accumulator of `bytes` bytes: a warp's lanes as
// LQ sources by LR rows, the warps as WQ blocks of sources by WR blocks of rows, so that a thread holds NR
// consecutive rows × NQ consecutive sources. The staged rows are CQ ≥ C sources and RR ≥ ROWS rows long (so that a
// thread reads its own at its index plus constants), the backward's RP apart (a 16-byte vector past RR: the lanes
// that form a row's scale read one row of several steps at once, which RR apart, a multiple of 32 banks, would all
// fall on one bank); EB steps are staged at a time, their values and factors in at most about 40 KiB (log; max_plus
// stages none). `shared`: the block's static shared memory, each array of hmm_edges in turn.
//
// The mma kind (C and ROWS multiples of 32, NT = ROWS · C / 32): each warp holds 32 rows × 32 sources as two m16 by
// four n8 fragments of mma.sync's accumulators (LQ and LR unused), so a thread's rows and sources are not consecutive
// (EdgeMmaTile); the staged rows are 8 words past a multiple of 32 (CQ = C + 8, RP = ROWS + 8), so that a fragment's
// reads, 4 steps by 8 rows or sources, fall in 32 banks; EB is a multiple of the 8 steps of an mma.
struct EdgeShape {
  int LQ, LR, WR, WQ, NQ, NR, CQ, RR, RP, EB;
  unsigned shared;
};
JB_HD constexpr EdgeShape edge_shape(int C, int NT, int ROWS, int bytes, bool log, int kind = kEdgeNarrow) {
  EdgeShape s{};
  const int warps = NT / 32;
  if (kind == kEdgeMma) {
    s.LQ = s.LR = 0;
    s.WQ = C / 32;
    s.WR = warps / (s.WQ > 0 ? s.WQ : 1);
    s.NQ = 8;
    s.NR = 4;
    s.CQ = C + 8;
    s.RR = ROWS;
    s.RP = ROWS + 8;
    const int staged = 20480 / ((s.CQ + s.RP) * bytes) / 8 * 8;
    s.EB = staged < 8 ? 8 : staged > 32 ? 32 : staged;
  } else {
    s.LQ = C > 16 ? 32 : C > 8 ? 16 : C > 4 ? 8 : C > 2 ? 4 : C > 1 ? 2 : 1;
    s.LR = 32 / s.LQ;
    const int row_blocks = (ROWS + s.LR - 1) / s.LR;
    s.WR = edge_pow2_at_most(warps < row_blocks ? warps : row_blocks);
    s.WQ = warps / s.WR;
    s.NQ = (C + s.LQ * s.WQ - 1) / (s.LQ * s.WQ);
    s.NR = (ROWS + s.LR * s.WR - 1) / (s.LR * s.WR);
    s.CQ = s.NQ * s.LQ * s.WQ;
    s.RR = s.NR * s.LR * s.WR;
    s.RP = s.RR + 16 / bytes;
    const int staged = 20480 / ((s.CQ + s.RP) * bytes);
    s.EB = staged < 1 ? 1 : staged > 32 ? 32 : staged;
  }
  const unsigned eb = unsigned(s.EB), b = unsigned(bytes);
  // A step's scalars (log's four, max_plus's grad_score alone; aligned to 16 bytes for what follows), its EdgeStep
  // and its sequence and row twice; log's staged values and factors, its rows' scales and kinds, its warps' spans and
  // the step's scalars as copied (max_plus reads none of them, and none is allocated).
  const unsigned scalars = ((log ? 4 : 1) * eb * b + 15) / 16 * 16;
  s.shared = scalars + 16 * eb + 32 * eb +
             (log ? 2 * eb * unsigned(s.CQ + s.RP) * b + 3 * unsigned(s.RR) * b + 4 * unsigned(s.RR) +
                        2 * unsigned(warps) * b + 4 * unsigned(warps) + 32 * eb + (eb * b + 7) / 8 * 8
                  : 0);
  return s;
}

// The blocks of NT threads an SM should hold at once where the accumulator is f32, the entry compiled for that many:
// 24 warps' worth (80 registers a thread), at most 16 blocks (what sm_75 and sm_86 hold); the wide and mma blocks, 32
// sums and transitions a thread, 16 warps' worth (128 registers). One in f64, whose entry at 256 threads would spill
// in fewer than about 180 registers a thread (smaller f64 blocks are left at one too: their registers are not bounded
// at compile time, so no count fits every one).
JB_HD constexpr int edge_blocks_per_sm(int NT, int bytes, int kind = kEdgeNarrow) {
  const int n = (kind != kEdgeNarrow ? 512 : 768) / NT;
  return bytes > 4 ? 1 : n > 16 ? 16 : n < 1 ? 1 : n;
}

} // namespace jb
