"""jitbmm.jax against what JAX users write, and against the same kernels through jitbmm.torch, in one process:
medians of synchronised wall times (block_until_ready; torch.cuda.synchronize) after warm-up calls, and for every
JAX call (and the products' torch calls) also the time a call of calls issued back to back (one wait at the end: the
runtimes' latency a call apart),
float32 inputs ~ N(0, 1), everything under jax.jit. Each JAX peer is compiled before it is timed; a peer that runs
out of memory or takes longer than its budget to compile says so instead of a figure.

    XLA_PYTHON_CLIENT_PREALLOCATE=false python3 bench/jax_peers.py [--reps 10]
        [--sections products,hmm,crf,viterbi,distributions,first]

Sections: logbmm forward and forward + backward (jitbmm.jax, jitbmm.torch, jnp's expand-logsumexp); the HMM's
log-likelihood value_and_grad (jitbmm.jax against jax.lax.scan + logsumexp); the CRF log-partition's value_and_grad
with ragged lengths (against a masked scan); Viterbi with its path (against a lax.scan max-plus decoder with
backtracking); a CRF's entropy and KL forward + backward (jitbmm.jax, jitbmm.torch, autodiff of the masked scan) and
its 4 best paths; the first call of a new product and of a chain under jit with empty caches
(bench/fresh_process.py), each in a fresh process."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The chains' figures are their chosen strategies', not a stand-in's quick builds (docs/caching-and-tuning.md, "First
# calls"): their plans wait for them here. The first calls' section runs its children with stand-ins, as users do.
os.environ.setdefault("JITBMM_STAND_IN", "off")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jitbmm.jax as jj  # noqa: E402
from fresh_process import fresh_env  # noqa: E402
from warm_up import warm_up  # noqa: E402


def wall_ms(fn, reps, warm=2):
    """Median ms of fn() (its outputs blocked on) after warm_up(..., warm)."""
    warm_up(lambda: jax.block_until_ready(fn()), warm)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def back_to_back_ms(fn, sync, reps, keep=4):
    """ms a call of fn() issued back to back, as a training loop issues them, with one wait at the end: the calls'
    throughput, without a wait's latency a call. The last `keep` results stay alive, as a loop's do; the warm-up
    calls follow the same pattern, so that the allocator has grown to it before the timing starts."""
    kept = []
    for _ in range(2):  # the warm-up round, then the timed one
        sync(kept)
        t = time.perf_counter()
        for _ in range(max(reps, keep + 2)):
            kept = (kept + [fn()])[-keep:]
        sync(kept)
    return (time.perf_counter() - t) * 1e3 / max(reps, keep + 2)


def guarded(fn, reps, sync=None):
    """A wall time (fn blocked on), or with `sync` (which waits for the calls whose results it is given) the
    back-to-back time, as text."""
    try:
        return f"{wall_ms(fn, reps) if sync is None else back_to_back_ms(fn, sync, reps):.3f}"
    except Exception as e:  # out of memory, mostly: say so, keep going
        return "OOM" if "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower() else type(e).__name__


def normal(key, shape):
    return jax.random.normal(jax.random.PRNGKey(key), shape, jnp.float32)


def products(reps):
    import torch
    import jitbmm.torch as jt
    print("logbmm (ms): jitbmm.jax | jitbmm.torch | jnp expand-logsumexp; forward, then forward + backward; each a"
          " synchronised call's wall time (calls issued back to back: ms a call)")
    jax_wait = jax.block_until_ready
    torch_wait = lambda _: torch.cuda.synchronize()  # noqa: E731
    for B, n in ((64, 512), (4, 2048), (8, 64)):
        a, b = normal(1, (B, n, n)), normal(2, (B, n, n))
        fwd = jax.jit(jj.logbmm)
        step = jax.jit(jax.grad(lambda a, b: jj.logbmm(a, b).sum(), argnums=(0, 1)))
        ta, tb = (torch.randn(B, n, n, device="cuda") for _ in range(2))
        ga, gb = ta.clone().requires_grad_(), tb.clone().requires_grad_()

        def torch_step():  # fresh gradients, as JAX's: none accumulated into .grad
            return torch.autograd.grad(jt.logbmm(ga, gb).sum(), (ga, gb))

        # The expanded terms [B, n, n, n], run where they take at most 1 GiB: at 64x512^3 (32 GiB) the reference did
        # not finish within minutes, XLA warning of a slow compile.
        fits = B * n ** 3 * 4 <= 2**30
        ref = jax.jit(lambda a, b: jax.nn.logsumexp(a[..., :, :, None] + b[..., None, :, :], -2))
        ref_step = jax.jit(jax.grad(lambda a, b: ref(a, b).sum(), argnums=(0, 1)))

        def both(fn, wait):  # "wall (back to back)": a torch call waited on by wait, a JAX call by its results
            waited = (lambda: wait(fn())) if wait is torch_wait else fn
            return f"{guarded(waited, reps)} ({guarded(fn, reps, wait)})"

        row = [f"{B}x{n}^3", both(lambda: fwd(a, b), jax_wait), both(lambda: jt.logbmm(ta, tb), torch_wait),
               both(lambda: ref(a, b), jax_wait) if fits else "not run",
               both(lambda: step(a, b), jax_wait), both(torch_step, torch_wait),
               both(lambda: ref_step(a, b), jax_wait) if fits else "not run"]
        print("  " + " | ".join(row), flush=True)
        if B == 64:  # what each runtime's own elementwise op takes, for the latency of a synchronised call
            add = jax.jit(lambda a, b: a + b)
            print(f"  runtime alone, a + b at {B}x{n}x{n}: XLA {both(lambda: add(a, b), jax_wait)} | torch "
                  f"{both(lambda: ta + tb, torch_wait)}", flush=True)


def scan_hmm(emissions, transitions, initial):
    """What JAX users write (dynamax's filter is this): a scan of logsumexp steps."""
    def step(alpha, e):
        alpha = jax.nn.logsumexp(alpha[:, None, :] + transitions[None], -1) + e
        return alpha, None
    alpha, _ = jax.lax.scan(step, initial + emissions[:, 0], jnp.swapaxes(emissions[:, 1:], 0, 1))
    return jax.nn.logsumexp(alpha, -1)


def wall_and_back_to_back(fn, reps):
    """A JAX call's synchronised wall time and, in brackets, its time issued back to back, as text."""
    return f"{guarded(fn, reps)} ({guarded(fn, reps, jax.block_until_ready)})"


def hmm(reps):
    print("HMM value_and_grad of the log-likelihood (ms, a synchronised call (calls issued back to back: ms a call)):"
          " jitbmm.jax | lax.scan + logsumexp")
    for B, T, C in ((32, 512, 64), (512, 32, 512)):
        e, t, i = normal(3, (B, T, C)), normal(4, (C, C)), normal(5, (C,))
        ours = jax.jit(jax.value_and_grad(lambda *x: jj.hmm_log_partition(*x).sum(), argnums=(0, 1, 2)))
        theirs = jax.jit(jax.value_and_grad(lambda *x: scan_hmm(*x).sum(), argnums=(0, 1, 2)))
        # The scan's [B, C, C] terms a step at B = 512, C = 512 (128 Mi a step, 32 steps): run with --scan-all only.
        peer = timed_compile(lambda: theirs(e, t, i), reps) if B * C * C <= 2**24 or SCAN_ALL else "not run"
        print(f"  {B}x{T}x{C} | {wall_and_back_to_back(lambda: ours(e, t, i), reps)} | {peer}", flush=True)
    # What a synchronised call waits beyond its kernels, for a program of XLA's own about as long on the GPU.
    x = normal(10, (4096, 4096))
    own = jax.jit(lambda x: (x @ x).sum())
    print(f"  runtime alone, XLA's own 4096^2 matmul: {wall_and_back_to_back(lambda: own(x), reps)}", flush=True)


def timed_compile(fn, reps, budget_s=120):
    """A peer's figures (wall_and_back_to_back), or how long its compile took where that passed the budget (it then
    is not timed)."""
    t = time.perf_counter()
    try:
        jax.block_until_ready(fn())
    except Exception as e:
        return "OOM" if "RESOURCE_EXHAUSTED" in str(e) else type(e).__name__
    first = time.perf_counter() - t
    if first > budget_s:
        return f"first call {first:.0f} s"
    return wall_and_back_to_back(fn, reps)


def scan_crf(potentials, lengths):
    def step(carry, xs):
        alpha, t = carry
        new = jax.nn.logsumexp(alpha[:, None, :] + xs, -1)
        alpha = jnp.where((t + 1 < lengths)[:, None], new, alpha)  # sequences past their length keep their alpha
        return (alpha, t + 1), None
    B, C = potentials.shape[0], potentials.shape[-1]
    (alpha, _), _ = jax.lax.scan(step, (jnp.zeros((B, C)), 0), jnp.swapaxes(potentials, 0, 1))
    return jax.nn.logsumexp(alpha, -1)


def crf(reps):
    print("CRF log-partition value_and_grad, ragged lengths (ms, a synchronised call (back to back)): jitbmm.jax | "
          "masked lax.scan")
    B, T, C = 32, 512, 64
    p = normal(6, (B, T - 1, C, C))
    lengths = jnp.asarray([T - (7 * b) % (T // 2) for b in range(B)])
    ours = jax.jit(jax.value_and_grad(lambda p: jj.chain_log_partition(p, lengths).sum()))
    theirs = jax.jit(jax.value_and_grad(lambda p: scan_crf(p, lengths).sum()))
    print(f"  {B}x{T}x{C} | {wall_and_back_to_back(lambda: ours(p), reps)} | {timed_compile(lambda: theirs(p), reps)}",
          flush=True)


def scan_viterbi(potentials):
    def step(alpha, xs):
        terms = alpha[:, None, :] + xs
        return terms.max(-1), terms.argmax(-1)
    B, C = potentials.shape[0], potentials.shape[-1]
    alpha, back = jax.lax.scan(step, jnp.zeros((B, C)), jnp.swapaxes(potentials, 0, 1))
    last = alpha.argmax(-1)

    def trace(state, ptr):
        prev = jnp.take_along_axis(ptr, state[:, None], 1)[:, 0]
        return prev, prev
    _, states = jax.lax.scan(trace, last, back, reverse=True)
    return alpha.max(-1), jnp.concatenate([jnp.swapaxes(states, 0, 1), last[:, None]], 1)


def viterbi(reps):
    print("Viterbi with its path (ms, a synchronised call (back to back)): jitbmm.jax | lax.scan max-plus with "
          "backtracking")
    B, T, C = 32, 512, 64
    p = normal(7, (B, T - 1, C, C))
    ours = jax.jit(jj.chain_viterbi)
    theirs = jax.jit(scan_viterbi)
    same = bool((ours(p)[1] == theirs(p)[1]).all())
    print(f"  {B}x{T}x{C} | {wall_and_back_to_back(lambda: ours(p), reps)} | "
          f"{timed_compile(lambda: theirs(p), reps)} | paths {'the same' if same else 'differ'}", flush=True)


def scan_divergence(p, q, lengths):
    """What JAX users write for a CRF's entropy (q None) or KL(p ‖ q): the edge marginals as the gradient of the
    masked scan's log-partition, then log Z and the expected scores, differentiated by autodiff (through the scan
    twice)."""
    log_z = scan_crf(p, lengths)
    marginals = jax.grad(lambda p: scan_crf(p, lengths).sum())(p)
    if q is None:
        return log_z - (marginals * p).sum((1, 2, 3))
    return (marginals * (p - q)).sum((1, 2, 3)) - log_z + scan_crf(q, lengths)


def distributions(reps):
    import torch
    import jitbmm.torch as jt
    print("CRF entropy and KL, forward + backward, ragged lengths; the 4 best paths' scores and paths (ms; JAX's: a "
          "synchronised call (back to back)): jitbmm.jax | jitbmm.torch | autodiff of the masked lax.scan")
    B, T, C = 32, 512, 64
    p, q = normal(8, (B, T - 1, C, C)), normal(9, (B, T - 1, C, C))
    lengths = jnp.asarray([T - (7 * b) % (T // 2) for b in range(B)])
    tp, tq = (torch.from_dlpack(x).clone().requires_grad_() for x in (p, q))
    tl = torch.from_dlpack(lengths).long()
    for name, ours, torch_f, theirs in (
            ("entropy", lambda p, q: jj.chain_entropy(p, lengths), lambda p, q: jt.chain_entropy(p, tl),
             lambda p, q: scan_divergence(p, None, lengths)),
            ("KL", lambda p, q: jj.chain_kl(p, q, lengths), lambda p, q: jt.chain_kl(p, q, tl),
             lambda p, q: scan_divergence(p, q, lengths))):
        step = jax.jit(jax.value_and_grad(lambda p, q: ours(p, q).sum(), argnums=(0, 1)))
        peer = jax.jit(jax.value_and_grad(lambda p, q: theirs(p, q).sum(), argnums=(0, 1)))

        def torch_step():  # fresh gradients, as JAX's: none accumulated into .grad
            torch.autograd.grad(torch_f(tp, tq).sum(), (tp, tq), allow_unused=True)  # the entropy reads p alone
            torch.cuda.synchronize()

        print(f"  {name} {B}x{T}x{C} | {wall_and_back_to_back(lambda: step(p, q), reps)} | "
              f"{guarded(torch_step, reps)} | "
              f"{timed_compile(lambda: peer(p, q), reps)}", flush=True)
    kbest = jax.jit(lambda p: jj.chain_kbest(p, 4, lengths))

    def torch_kbest():
        jt.chain_kbest(tp.detach(), 4, tl)
        torch.cuda.synchronize()

    print(f"  kbest(4) {B}x{T}x{C} | {guarded(lambda: kbest(p), reps)} | {guarded(torch_kbest, reps)} | no peer",
          flush=True)


FIRST_JAX = """
import sys, time
import jax, jax.numpy as jnp
sys.path.insert(0, {python!r})
import jitbmm.jax as jj
x = jax.random.normal(jax.random.PRNGKey(0), {shape}); jax.block_until_ready(x)
# JAX's own first call of a program as large, for the part of a first call that is the runtime's.
own = jax.jit(jax.value_and_grad(lambda x: (x * x).sum()))
t = time.perf_counter(); jax.block_until_ready(own(x)); floor = time.perf_counter() - t
# The first call in its stages, as jit's first call runs them: the trace (where jitbmm.jax makes the plans),
# lowering and XLA's compile, then the run.
t = [time.perf_counter()]
traced = jax.jit({call}).trace(x); t.append(time.perf_counter())
compiled = traced.lower().compile(); t.append(time.perf_counter())
jax.block_until_ready(compiled(x)); t.append(time.perf_counter())
print(f"{{t[3] - t[0]:.3f}} (trace {{t[1] - t[0]:.3f}}, lower + compile {{t[2] - t[1]:.3f}}, run {{t[3] - t[2]:.3f}}; "
      f"JAX's own x * x value_and_grad {{floor:.3f}})")
"""

FIRST_TORCH = """
import sys, time, torch
sys.path.insert(0, {python!r})
import jitbmm.torch as jt
x = torch.randn{shape}.cuda().requires_grad_({grad}); torch.cuda.synchronize()
t = time.perf_counter(); {call}; torch.cuda.synchronize()
print(f"{{time.perf_counter() - t:.3f}}")
"""

# (what, shape, the jitted function of x, the same through jitbmm.torch): a product, and a chain of each strategy
# (the HMM's tables zeros beside emissions x).
FIRST_CASES = [
    ("max_plus 64x512^3 forward", (64, 512, 512), "lambda x: jj.maxbmm(x, x)", "jt.maxbmm(x, x)"),
    ("CRF log-partition 32x512x64 value_and_grad (sequential)", (32, 511, 64, 64),
     "jax.value_and_grad(lambda x: jj.chain_log_partition(x).sum())", "jt.chain_log_partition(x).sum().backward()"),
    ("CRF log-partition 1x4096x64 value_and_grad (chunked)", (1, 4095, 64, 64),
     "jax.value_and_grad(lambda x: jj.chain_log_partition(x).sum())", "jt.chain_log_partition(x).sum().backward()"),
    ("HMM log-likelihood 512x32x512 value_and_grad (stepped)", (512, 32, 512),
     "jax.value_and_grad(lambda x: jj.hmm_log_partition(x, jnp.zeros((512, 512)), jnp.zeros(512)).sum())",
     "jt.hmm_log_partition(x, torch.zeros(512, 512, device='cuda'), torch.zeros(512, device='cuda')).sum().backward()"),
]


def first(reps):
    del reps
    print("First call of a new problem, fresh process, empty caches, stand-ins on (s): under jit (its trace makes the "
          "plans; its stages, and JAX's own first call of a program of x alone) | the same through jitbmm.torch")
    python = str(Path(__file__).resolve().parent.parent / "python")
    for what, shape, jax_call, torch_call in FIRST_CASES:
        seconds = []
        for code in (FIRST_JAX.format(python=python, shape=shape, call=jax_call),
                     FIRST_TORCH.format(python=python, shape=shape, call=torch_call, grad="backward" in torch_call)):
            with tempfile.TemporaryDirectory() as cache:
                done = subprocess.run([sys.executable, "-c", code], env=fresh_env(cache, JITBMM_STAND_IN="on"),
                                      capture_output=True, text=True)
            seconds.append(done.stdout.strip() or "failed: " + done.stderr.strip()[-200:])
        print(f"  {what} | {seconds[0]} | {seconds[1]}", flush=True)


SCAN_ALL = False


def main():
    global SCAN_ALL
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--scan-all", action="store_true", help="time the HMM scan at 512x32x512 too")
    ap.add_argument("--sections", default="products,hmm,crf,viterbi,distributions,first")
    args = ap.parse_args()
    SCAN_ALL = args.scan_all
    print(f"device: {jax.devices()[0].device_kind}; jax {jax.__version__}; median of {args.reps}", flush=True)
    for name in args.sections.split(","):
        globals()[name](args.reps)


if __name__ == "__main__":
    main()
