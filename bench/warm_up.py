"""How the benchmarks warm a call up before timing it: a few calls, then calls for at least WARM_SECONDS. A GPU (and a
CPU) left idle, while builds ended or a peer ran, runs its first calls at lower clocks, which a small problem's few
milliseconds of timed calls would otherwise measure."""

import time

WARM_SECONDS = 0.2


def warm_up(call, calls, settle=None):
    """`calls` calls of call() (which waits for its own results), then settle() where given (bench/chain_timing.py:
    until every plan has settled), then calls until WARM_SECONDS have passed, at least one."""
    for _ in range(calls):
        call()
    if settle is not None:
        settle()
    start = time.perf_counter()
    while True:
        call()
        if time.perf_counter() - start >= WARM_SECONDS:
            return
