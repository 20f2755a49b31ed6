"""What the jitbmm.torch GPU test programs share: their main, a test case with jitbmm.torch at hand on the GPU, and
the CUDA-graph check; torch (None where it is missing), whether it sees a CUDA GPU, what rounding to a half type may
change, and an HMM's tables as the CRF form's potentials (formed, formed_with_start). Imports without torch (the
programs then report themselves skipped)."""

import math
import unittest

import program_main

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
    # What rounding a value to a half type may change, relative to its size.
    HALF_ROUNDING = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
except ImportError:
    torch = None
    HAVE_CUDA = False
    HALF_ROUNDING = {}


def gpu_main():
    """The main of a jitbmm.torch GPU test program (program_main.run): skipped where torch or a CUDA GPU is missing."""
    missing = ("torch is not installed here" if torch is None else
               None if torch.cuda.is_available() else "torch sees no CUDA GPU here")
    return program_main.run(missing)


def formed(emissions, transitions, initial):
    """An HMM's potentials [B, T - 1, C, C]: transitions[c, p] + emissions[:, t + 1, c], the first step adding
    initial[p] + emissions[:, 0, p] (transitions [C, C] or [B, C, C], initial [C] or [B, C]): the CRF form of the same
    chain where every length is at least 2 and the tables are finite."""
    B, T, C = emissions.shape
    pot = transitions.expand(B, C, C)[:, None] + emissions[:, 1:, :, None]
    first = (initial.expand(B, C) + emissions[:, 0])[:, None, None, :]
    return torch.cat((pot[:, :1] + first, pot[:, 1:]), 1)


def formed_with_start(emissions, transitions, initial):
    """An HMM's chain as CRF potentials of one more position [B, T, C, C], for lengths one more: a first edge from
    state 0 of a start position into each state c, initial[c] + emissions[:, 0, c] (-inf from the other states), then
    transitions[c, p] + emissions[:, t + 1, c]. The same distribution over the HMM's paths for every length, 1 included,
    formed by torch operations, so that a gradient with respect to the potentials reaches the tables."""
    B, T, C = emissions.shape
    first = (initial.expand(B, C) + emissions[:, 0])[:, :, None]
    from_start = torch.arange(C, device=emissions.device) == 0
    first = torch.where(from_start, first, torch.full((), -math.inf, dtype=emissions.dtype, device=emissions.device))
    steps = transitions.expand(B, C, C)[:, None] + emissions[:, 1:, :, None]
    return torch.cat((first[:, None], steps), 1)


class GpuCase(unittest.TestCase):
    """jitbmm.torch as `jt` and the CUDA device as `dev`, tuning off (the tests choose what they run)."""

    @classmethod
    def setUpClass(cls):
        import jitbmm
        import jitbmm.torch as jt
        cls.jt = jt
        jitbmm.set_tune_policy("never")
        cls.dev = torch.device("cuda")

    def assert_graph_replays(self, step, refill):
        """step() captured in a CUDA graph (after a warm-up on a side stream, as torch advises: plans made, kernels
        loaded), replayed after refill() gives new inputs, must give what a plain step() gives then."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = step()
        with torch.no_grad():
            refill()
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(outs, step()):
            torch.testing.assert_close(got, want)
