"""The C ABI (include/jitbmm/c_api.h) as ctypes sees it: its problem structures and each function's argument and
result types, declared once when the library loads (jitbmm._library)."""

import ctypes


class _CProblem(ctypes.Structure):
    _fields_ = [("semiring", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("out_dtype", ctypes.c_char_p),
                ("B", ctypes.c_int64), ("M", ctypes.c_int64), ("K", ctypes.c_int64), ("N", ctypes.c_int64),
                ("a_strides", ctypes.c_int64 * 3), ("b_strides", ctypes.c_int64 * 3),
                ("out_strides", ctypes.c_int64 * 3), ("with_argmax", ctypes.c_int), ("precision", ctypes.c_char_p)]


class _CChainProblem(ctypes.Structure):
    _fields_ = [("semiring", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("B", ctypes.c_int64),
                ("T", ctypes.c_int64), ("C", ctypes.c_int64), ("strides", ctypes.c_int64 * 4),
                ("with_lengths", ctypes.c_int), ("form", ctypes.c_char_p), ("batched_transitions", ctypes.c_int),
                ("batched_initial", ctypes.c_int), ("emission_strides", ctypes.c_int64 * 3),
                ("transition_strides", ctypes.c_int64 * 3), ("initial_strides", ctypes.c_int64 * 2)]


class _CHmmTables(ctypes.Structure):
    """jitbmm_hmm_tables: an HMM's three tables (the field's too) as a call of the HMM form reads them."""
    _fields_ = [("emissions", ctypes.c_void_p), ("transitions", ctypes.c_void_p), ("initial", ctypes.c_void_p)]


class _CHmmGradients(ctypes.Structure):
    """jitbmm_hmm_gradients: where a backward of the HMM form writes its tables' gradients (None: not asked for)."""
    _fields_ = [("emissions", ctypes.c_void_p), ("transitions", ctypes.c_void_p), ("initial", ctypes.c_void_p)]


def _chain_problem(semiring, dtype, B, T, C, with_lengths, form=None, batched_transitions=False,
                   batched_initial=False):
    """A jitbmm_chain_problem of contiguous operands (every stride 0); form None is the CRF form."""
    return _CChainProblem(semiring.encode(), dtype.encode(), B, T, C, (ctypes.c_int64 * 4)(), int(with_lengths),
                          None if form is None else form.encode(), int(batched_transitions), int(batched_initial))


def _declare(lib):
    status = ctypes.c_int
    lib.jitbmm_version.restype = ctypes.c_char_p
    lib.jitbmm_last_error.restype = ctypes.c_char_p
    lib.jitbmm_plan_create_on_stream.argtypes = [ctypes.POINTER(_CProblem), ctypes.c_void_p,
                                                 ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_plan_create_on_stream.restype = status
    lib.jitbmm_plan_prepare.argtypes = [ctypes.POINTER(_CProblem), ctypes.c_int, ctypes.c_int]
    lib.jitbmm_plan_prepare.restype = status
    lib.jitbmm_set_tune_policy.argtypes = [ctypes.c_char_p]
    lib.jitbmm_set_tune_policy.restype = status
    lib.jitbmm_plan_workspace_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_plan_workspace_bytes.restype = status
    lib.jitbmm_plan_backward_workspace_bytes_on_stream.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 3 + [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_plan_backward_workspace_bytes_on_stream.restype = status
    lib.jitbmm_plan_run_with_workspace.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_plan_run_with_workspace.restype = status
    lib.jitbmm_plan_backward_with_workspace.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_plan_backward_with_workspace.restype = status
    lib.jitbmm_release_pool_memory.argtypes = []
    lib.jitbmm_release_pool_memory.restype = status
    lib.jitbmm_wait_for_builds.argtypes = []
    lib.jitbmm_wait_for_builds.restype = status
    lib.jitbmm_plan_kernel_name.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]
    lib.jitbmm_plan_kernel_name.restype = status
    lib.jitbmm_plan_settled.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.jitbmm_plan_settled.restype = status
    lib.jitbmm_plan_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_plan_destroy.restype = None
    lib.jitbmm_reference.argtypes = [ctypes.POINTER(_CProblem), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p]
    lib.jitbmm_reference.restype = status
    lib.jitbmm_export_choices.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    lib.jitbmm_export_choices.restype = status
    lib.jitbmm_import_choices.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_import_choices.restype = status
    lib.jitbmm_cache_dir.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    lib.jitbmm_cache_dir.restype = status
    # Chains (jitbmm.torch.chain_log_partition, chain_viterbi; chain_strategy): every pointer a c_void_p.
    lib.jitbmm_chain_plan_create.argtypes = [ctypes.POINTER(_CChainProblem), ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_chain_plan_create.restype = status
    lib.jitbmm_chain_plan_saved_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_plan_saved_bytes.restype = status
    lib.jitbmm_chain_problem_saved_bytes.argtypes = [ctypes.POINTER(_CChainProblem), ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_problem_saved_bytes.restype = status
    lib.jitbmm_chain_plan_workspace_bytes.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_plan_workspace_bytes.restype = status
    lib.jitbmm_chain_plan_run.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_chain_plan_run.restype = status
    lib.jitbmm_chain_plan_backward_with_workspace.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_size_t,
                                                                                       ctypes.c_void_p]
    lib.jitbmm_chain_plan_backward_with_workspace.restype = status
    lib.jitbmm_chain_plan_run_hmm.argtypes = [ctypes.c_void_p] * 10 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_chain_plan_run_hmm.restype = status
    lib.jitbmm_chain_plan_backward_workspace_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_plan_backward_workspace_bytes.restype = status
    lib.jitbmm_chain_plan_backward_hmm.argtypes = [ctypes.c_void_p] * 12 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_chain_plan_backward_hmm.restype = status
    lib.jitbmm_chain_plan_kernel_name.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]
    lib.jitbmm_chain_plan_kernel_name.restype = status
    lib.jitbmm_chain_plan_strategy.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]
    lib.jitbmm_chain_plan_strategy.restype = status
    lib.jitbmm_chain_plan_settled.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.jitbmm_chain_plan_settled.restype = status
    lib.jitbmm_chain_plan_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_chain_plan_destroy.restype = None
    # Chain expectations (jitbmm.torch.chain_entropy, chain_cross_entropy, chain_kl, hmm_entropy,
    # hmm_cross_entropy, hmm_kl).
    lib.jitbmm_chain_expectation_create.argtypes = [ctypes.POINTER(_CChainProblem), ctypes.c_int,
                                                    ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_chain_expectation_create.restype = status
    lib.jitbmm_chain_expectation_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                                   ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_expectation_bytes.restype = status
    lib.jitbmm_chain_expectation_saved_bytes.argtypes = [ctypes.POINTER(_CChainProblem), ctypes.c_int,
                                                         ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_expectation_saved_bytes.restype = status
    lib.jitbmm_chain_expectation_run.argtypes = [ctypes.c_void_p] * 8
    lib.jitbmm_chain_expectation_run.restype = status
    lib.jitbmm_chain_expectation_backward.argtypes = [ctypes.c_void_p] * 12 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_chain_expectation_backward.restype = status
    lib.jitbmm_chain_expectation_run_hmm.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(_CHmmTables)] * 2 + [
        ctypes.c_void_p] * 5
    lib.jitbmm_chain_expectation_run_hmm.restype = status
    lib.jitbmm_chain_expectation_backward_hmm.argtypes = (
        [ctypes.c_void_p] + [ctypes.POINTER(_CHmmTables)] * 2 + [ctypes.c_void_p] * 6 +
        [ctypes.POINTER(_CHmmGradients)] * 2 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
    lib.jitbmm_chain_expectation_backward_hmm.restype = status
    lib.jitbmm_chain_expectation_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_chain_expectation_destroy.restype = None
    # Chain samples (jitbmm.torch.chain_sample, hmm_sample).
    lib.jitbmm_chain_sampler_create.argtypes = [ctypes.POINTER(_CChainProblem), ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_chain_sampler_create.restype = status
    lib.jitbmm_chain_sampler_workspace_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_sampler_workspace_bytes.restype = status
    lib.jitbmm_chain_sampler_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                             ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_void_p]
    lib.jitbmm_chain_sampler_run.restype = status
    lib.jitbmm_chain_sampler_run_hmm.argtypes = [ctypes.c_void_p] * 5 + [
        ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_chain_sampler_run_hmm.restype = status
    lib.jitbmm_chain_sampler_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_chain_sampler_destroy.restype = None
    # The k best paths of chains (jitbmm.torch.chain_kbest, hmm_kbest).
    lib.jitbmm_chain_kbest_create.argtypes = [ctypes.POINTER(_CChainProblem), ctypes.c_int,
                                              ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_chain_kbest_create.restype = status
    lib.jitbmm_chain_kbest_workspace_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.jitbmm_chain_kbest_workspace_bytes.restype = status
    lib.jitbmm_chain_kbest_run.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.jitbmm_chain_kbest_run.restype = status
    lib.jitbmm_chain_kbest_run_hmm.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_void_p, ctypes.c_size_t,
                                                                        ctypes.c_void_p]
    lib.jitbmm_chain_kbest_run_hmm.restype = status
    lib.jitbmm_chain_kbest_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_chain_kbest_destroy.restype = None
    # The expectation semiring's product (jitbmm.torch.entropy_semiring_bmm).
    lib.jitbmm_entropy_product_create.argtypes = [ctypes.c_char_p] + [ctypes.c_int64] * 4 + [
        ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_entropy_product_create.restype = status
    lib.jitbmm_entropy_product_run.argtypes = [ctypes.c_void_p] * 5
    lib.jitbmm_entropy_product_run.restype = status
    lib.jitbmm_entropy_product_backward.argtypes = [ctypes.c_void_p] * 8
    lib.jitbmm_entropy_product_backward.restype = status
    lib.jitbmm_entropy_product_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_entropy_product_destroy.restype = None
    # The k-max semiring's product (jitbmm.torch.kmax_semiring_bmm).
    lib.jitbmm_kmax_product_create.argtypes = [ctypes.c_char_p, ctypes.c_int] + [ctypes.c_int64] * 4 + [
        ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_kmax_product_create.restype = status
    lib.jitbmm_kmax_product_run.argtypes = [ctypes.c_void_p] * 6
    lib.jitbmm_kmax_product_run.restype = status
    lib.jitbmm_kmax_product_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_kmax_product_destroy.restype = None
    for name, restype in (("semiring_count", ctypes.c_int), ("dtype_count", ctypes.c_int)):
        getattr(lib, "jitbmm_" + name).argtypes = []
        getattr(lib, "jitbmm_" + name).restype = restype
    for name, restype in (("semiring_name", ctypes.c_char_p), ("semiring_has_argmax", ctypes.c_int),
                          ("semiring_backward", ctypes.c_int), ("dtype_name", ctypes.c_char_p),
                          ("dtype_size", ctypes.c_int)):
        getattr(lib, "jitbmm_" + name).argtypes = [ctypes.c_int]
        getattr(lib, "jitbmm_" + name).restype = restype
