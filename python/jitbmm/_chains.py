"""Chain problems in the jitbmm package, without torch: which strategy a chain runs (docs/chains.md,
"Strategies"), as the plan the C ABI makes of it says (jitbmm_chain_plan_strategy)."""

import ctypes
import time

import jitbmm

# log: chain_log_partition and hmm_log_partition; max_plus: chain_viterbi and hmm_viterbi (jitbmm.torch).
_SEMIRINGS = ("log", "max_plus")
_FORMS = ("crf", "hmm")


def chain_strategy(semiring, dtype, B, T, C, form="crf", batched_transitions=False):
    """The strategy jitbmm runs a chain of B sequences of T positions over C states in on the current CUDA device
    (with torch: ``with torch.cuda.device(i)``): "sequential", "chunked" or "stepped". semiring: "log" (the
    log-partition) or "max_plus" (Viterbi); dtype: "f32", "f64", "f16" or "bf16"; form: "crf" (potentials, as
    jitbmm.torch.chain_log_partition takes) or "hmm" (tables, as hmm_log_partition takes); batched_transitions: the
    HMM's transitions are [B, C, C] rather than one [C, C] table. It makes the chain's plan, as the first call of
    those functions would (compiling its kernels or loading them from the cache; a stored decision of `jitbmm tune
    --chain` counts), and waits for the chosen strategy's kernels where a stand-in runs the calls while they build
    (docs/caching-and-tuning.md, "First calls"), so it needs a GPU (NoDriverError without one). Bad arguments raise
    TypeError or ValueError naming the argument."""
    semiring = jitbmm._choice(semiring, "semiring", _SEMIRINGS)
    dtype = jitbmm._choice(dtype, "dtype", jitbmm._table("DTYPES"))
    B, T, C = (jitbmm._integer(v, name, 0, jitbmm._INT64_MAX) for v, name in zip((B, T, C), "BTC"))
    form = jitbmm._choice(form, "form", _FORMS)
    batched = jitbmm._flag(batched_transitions, "batched_transitions")
    if batched and form != "hmm":
        raise ValueError("batched_transitions: only the hmm form has transition tables")
    problem = jitbmm._chain_problem(semiring, dtype, B, T, C, False, form, batched)
    lib, handle, name = jitbmm._library(), ctypes.c_void_p(), ctypes.c_char_p()
    jitbmm._check(lib.jitbmm_chain_plan_create(ctypes.byref(problem), ctypes.byref(handle)))
    try:
        settled = ctypes.c_int()
        while True:  # the strategy the plan chose, once no stand-in runs its calls
            jitbmm._check(lib.jitbmm_chain_plan_settled(handle, ctypes.byref(settled)))
            if settled.value:
                break
            time.sleep(0.01)
        jitbmm._check(lib.jitbmm_chain_plan_strategy(handle, ctypes.byref(name)))
    finally:
        lib.jitbmm_chain_plan_destroy(handle)
    return name.value.decode()
