"""How bench/chain.py's sections time a call: the median of CUDA-event times after warm-up calls, the peak
device memory the call adds, and, where a call gives no figure, why (out of memory, or refused). And the median of
CUDA-synchronised wall times, what a caller waits (bench/torch_struct_crf.py, bench/divergence.py,
bench/torch_percall.py). Both time jitbmm's chain and product plans once they run their chosen strategies and
variants: a plan whose kernels were not in the caches runs a stand-in of quick builds until then
(docs/caching-and-tuning.md, "First calls"): the warm-up (bench/warm_up.py) waits for them before its last calls."""

import gc
import statistics
import time

import torch

import jitbmm
from warm_up import warm_up

FUSED = "jitbmm chain"  # the row of jitbmm's fused chain kernels, in either form, in every section


def settled():
    """Waits until every chain plan of jitbmm.torch and every product plan has settled: every build in the background
    has ended (jitbmm.wait_for_builds), then a second more where one had not. (A chosen build that failed leaves its
    stand-in serving, with the library's warning.)"""
    from jitbmm import _torch_chains
    import jitbmm.torch as jt

    def all_settled():  # a chain plan reads its state again in _describe
        plans = list(_torch_chains._plans.values())
        for plan in plans:
            plan._describe()
        return all(plan.settled for plan in plans) and all(k.plan.settled for k in list(jt._kernels.values()))

    waited = not all_settled()
    jitbmm.wait_for_builds()
    all_settled()
    if waited:
        time.sleep(1.0)


def warm(fn, calls):
    """warm_up's calls of fn(), the device synchronised after each, the plans settled before the last ones."""

    def call():
        fn()
        torch.cuda.synchronize()

    warm_up(call, calls, settled)


def measure(fn, reps):
    """(median ms, peak MiB added) of fn() by CUDA events after warm(fn, 3); None where memory runs out."""
    try:
        warm(fn, 3)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times), (torch.cuda.max_memory_allocated() - base) / 2**20
    except (torch.OutOfMemoryError, jitbmm.CudaError) as e:
        if isinstance(e, jitbmm.CudaError) and "OUT_OF_MEMORY" not in str(e):
            raise
        return None
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def wall_ms(fn, reps, warmups=3):
    """The median wall time of fn() in ms, the device synchronised after each call, after warm(fn, warmups)."""
    warm(fn, warmups)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def kernel_ms(fn, calls=5):
    """The GPU time of each kernel fn() launches, ms a call, largest first: torch.profiler's CUDA activity over `calls`
    calls after warm(fn, 3), a kernel's launches within a call summed."""
    from torch.profiler import ProfilerActivity, profile

    warm(fn, 3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for event in prof.events():
        if event.device_type.name == "CUDA":
            times[event.name] = times.get(event.name, 0.0) + event.device_time / 1000 / calls
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def first_line(error):
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


def attempt(fn, reps):
    """(measure(fn, reps), None), or (None, why): "OOM", "refused: " and the first line of the ValueError of a
    shape the callee does not take, or "failed: " and the first line of any other error, so that one peer's
    failure leaves the other rows of the run (a CUDA error that spoils the context still shows in every row after
    it)."""
    try:
        result = measure(fn, reps)
    except ValueError as e:
        return None, "refused: " + first_line(e)
    except Exception as e:  # a peer's own errors are of any type
        return None, "failed: " + first_line(e)
    return result, None if result else "OOM"


def forward_only(fn, inputs):
    def run():
        with torch.no_grad():
            fn(*inputs)
    return run


def forward_backward(fn, inputs):
    """fn's forward and the gradients of the sum of its result with respect to every input."""
    def run():
        xs = [x.detach().requires_grad_(True) for x in inputs]
        torch.autograd.grad(fn(*xs).sum(), xs)
    return run


def cell(result):
    return f"{'OOM':>9} {'':>9}" if result is None else f"{result[0]:9.3f} {result[1]:9.1f}"


def ms(result, width=9):
    """A time, or '-' where there is none (the row's note says why)."""
    return f"{result[0]:{width}.3f}" if result else f"{'-':>{width}}"


def row(section, B, T, C, peer, step, result, why=None, **extra):
    """One row of the JSON output."""
    return dict(section=section, B=B, T=T, C=C, peer=peer, **{"pass": step}, ms=result and result[0],
                peak_mib=result and result[1], why=why, **extra)
