"""A chain's and a product's first calls through jitbmm.torch while a stand-in runs them for the strategy or the
variants its plan chose (docs/caching-and-tuning.md, "First calls"), on the GPU machine: each case a new process with empty caches (jitbmm's
and the CUDA driver's), so that the chosen strategy compiles while the first calls run. The stand-in's scores,
gradients and Viterbi paths, those of a backward that comes after the plan settled of a forward the stand-in ran, and
the chosen strategy's afterwards, each against the float64 forward algorithms of test_torch_hmm and
test_torch_chain: the stepped strategy's stand-in (its products in their default kernels) for an HMM of many
sequences, the chunked strategy's (the sequential kernels, whose `saved` differs from the chunks', so that a forward
that saves for a backward waits for the chunks) for one long CRF chain, and the sequential strategy's (its own
kernels) for a batch of CRF chains and HMM Viterbi paths. Every stand-in's kernels are quick builds (NVRTC's
--Ofast-compile), the chosen strategy's not. A log product whose
variants are exp_matmul's runs quick builds of its default variants meanwhile, forward and backward.

Run as a program (the python_torch_stand_in CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is
missing, and fails if any test is skipped where both exist."""

import json
import os
import subprocess
import sys
import tempfile
import time

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import GpuCase, gpu_main, torch  # noqa: E402

# (B, T, C) of each case: many sequences sharing one table of many states, the stepped strategy's by the rule (its
# fused form); one long CRF chain, the chunked strategy's; a batch of CRF chains and of HMM sequences of a few dozen
# states, the sequential strategy's.
SHAPES = {"hmm-log": (512, 9, 512), "hmm-viterbi": (512, 9, 512), "crf-chunked": (1, 1024, 40),
          "crf-sequential": (16, 65, 40), "hmm-viterbi-sequential": (16, 65, 40)}


def plans():
    """jitbmm.torch's chain plans of this process."""
    from jitbmm import _torch_chains
    return list(_torch_chains._plans.values())


def strategy(chain):
    import ctypes
    import jitbmm
    name = ctypes.c_char_p()
    jitbmm._check(jitbmm._library().jitbmm_chain_plan_strategy(chain.handle, ctypes.byref(name)))
    return name.value.decode()


def settled_now():
    """Whether every plan runs its chosen strategy now, asked of the library (a plan's `settled` is what its last call
    found as it began)."""
    import ctypes
    import jitbmm
    flag = ctypes.c_int()
    for chain in plans():
        jitbmm._check(jitbmm._library().jitbmm_chain_plan_settled(chain.handle, ctypes.byref(flag)))
        if not flag.value:
            return False
    return True


def settle(timeout=300.0):
    """Waits until every plan runs its chosen strategy; whether they all do."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for chain in plans():
            chain._describe()
        if all(chain.settled for chain in plans()):
            return True
        time.sleep(0.05)
    return False


def relative_errors(got, ref):
    """Each output's largest difference from the reference, relative to the reference's largest value."""
    return [float((g.double() - r).abs().max()) / (float(r.abs().max()) or 1.0) for g, r in zip(got, ref)]


# The stored decisions of the product case: exp_matmul for its forward and both passes (the shipped decisions of an
# H200 say the same), imported as this machine's.
PRODUCT = "log f32 f32 64 512 512 512 262144 512 1 262144 512 1 262144 512 1 0 exact"
PRODUCT_SPEC = "semiring=log dtype=f32 out=f32 argmax=0 strategy=exp_matmul"
PRODUCT_CHOICES = "".join(
    [f"choice forward {PRODUCT} | {PRODUCT_SPEC} index64=0 tile=128x128x16 thread=8x8 min_blocks=2 math=tf32x3\n"] +
    [f"choice {p} {PRODUCT} | {PRODUCT_SPEC} pass={p} index64=0 tile=128x128x16 thread=8x8 min_blocks=1 math=tf32x3\n"
     for p in ("grad_a", "grad_b")])


def product_child():
    """A first training step of logbmm at 64x512x512x512 whose variants are exp_matmul's, which compile for seconds:
    the plan's stand-in (quick builds of the default variants) runs it; its forward and gradients, those of a backward
    after the plan settled of a forward the stand-in ran, and the chosen kernels' afterwards, against float64 on the
    first batch (the batches are independent)."""
    import jitbmm
    import jitbmm.torch as jt
    torch.manual_seed(4)
    jitbmm.import_choices(PRODUCT_CHOICES)
    a, b = torch.randn(64, 512, 512, device="cuda"), torch.randn(64, 512, 512, device="cuda")
    ra, rb = a[:1].double().requires_grad_(), b[:1].double().requires_grad_()
    ref_out = torch.logsumexp(ra[:, :, :, None] + rb[:, None, :, :], dim=2)
    ref_out.sum().backward()
    ref = [ref_out.detach(), ra.grad, rb.grad]

    def step():
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        return jt.logbmm(x, y), x, y

    def finish(out, x, y):
        out.sum().backward()
        return [out.detach()[:1], x.grad[:1], y.grad[:1]]

    plan = lambda: next(iter(jt._kernels.values())).plan  # noqa: E731
    facts = {}
    first = step()
    facts["first_settled"], facts["first_kernel"] = plan().settled, plan().kernel_name
    first = finish(*first)
    pending = step()
    end = time.monotonic() + 300
    while not plan().settled and time.monotonic() < end:
        time.sleep(0.05)
    facts["settled"], facts["kernel_after"] = plan().settled, plan().kernel_name
    late = finish(*pending)
    time.sleep(5)  # the passes build beside the forward; by now they are built
    after = finish(*step())
    for name, got in (("first", first), ("late", late), ("after", after)):
        facts[name] = relative_errors(got, ref)
    print(json.dumps(facts))


def child(case):
    """One case in this (new) process: the facts the parent checks, as JSON on the last line of stdout."""
    if case == "logbmm":
        return product_child()
    import jitbmm.torch as jt
    import test_torch_chain
    import test_torch_hmm
    torch.manual_seed(3)
    B, T, C = SHAPES[case]
    dev = torch.device("cuda")
    if case.startswith("crf-"):
        tables = [torch.randn(B, T - 1, C, C, device=dev)]
        call = jt.chain_log_partition
        reference = lambda *t: test_torch_chain.reference_scores(*t, None, "log")  # noqa: E731
    else:
        tables = [torch.randn(B, T, C, device=dev), torch.randn(C, C, device=dev), torch.randn(C, device=dev)]
        call = jt.hmm_log_partition
        reference = lambda *t: test_torch_hmm.reference_scores(*t, None, "log")  # noqa: E731
    facts = {}
    quick = None
    if case == "crf-chunked":  # a forward that saves nothing runs on the stand-in; one that saves waits for the chunks
        with torch.no_grad():
            quick = call(*tables)
        facts["nograd_settled"] = all(chain.settled for chain in plans())
        facts["nograd_strategy"] = strategy(plans()[0])
    if not case.startswith("hmm-viterbi"):
        def step():
            inputs = [t.clone().requires_grad_() for t in tables]
            return call(*inputs), inputs

        def finish(score, inputs):
            score.sum().backward()
            return [score.detach()] + [t.grad for t in inputs]

        first, first_inputs = step()
        facts["first_settled"] = all(chain.settled for chain in plans())  # as the call began
        facts["settled_after_first"] = settled_now()
        facts["first_strategy"] = strategy(plans()[0])
        first = finish(first, first_inputs)
        pending = step()  # a forward of the stand-in whose backward runs after the plan settled
        facts["settled"] = settle()
        facts["strategy_after"] = strategy(plans()[0])
        late = finish(*pending)
        after = finish(*step())
        # The float64 reference: the score and its gradients.
        ref_inputs = [t.double().requires_grad_() for t in tables]
        ref_score = reference(*ref_inputs)
        ref_score.sum().backward()
        ref = [ref_score.detach()] + [t.grad for t in ref_inputs]
        for name, got in (("first", first), ("late", late), ("after", after)):
            facts[name] = relative_errors(got, ref)
        if quick is not None:
            facts["nograd"] = relative_errors([quick], ref[:1])[0]
    else:
        ref = test_torch_hmm.reference_paths(*[t.double() for t in tables], None)
        score, path = jt.hmm_viterbi(*tables)
        facts["first_settled"] = all(chain.settled for chain in plans())
        facts["first_strategy"] = strategy(plans()[0])
        facts["first"] = bool(torch.equal(path.long().cpu(), ref))
        facts["settled"] = settle()
        facts["strategy_after"] = strategy(plans()[0])
        score_after, path_after = jt.hmm_viterbi(*tables)
        facts["after"] = bool(torch.equal(path_after.long().cpu(), ref))
        facts["scores_agree"] = float((score - score_after).abs().max() / score.abs().max())
    print(json.dumps(facts))


class StandInTest(GpuCase):
    def run_child(self, case):
        with tempfile.TemporaryDirectory() as root:
            env = dict(os.environ, JITBMM_CACHE_DIR=os.path.join(root, "jitbmm"),
                       CUDA_CACHE_PATH=os.path.join(root, "driver"), JITBMM_STAND_IN="on")
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case], env=env,
                               capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def check_first_calls(self, facts, stand_in, chosen):
        # With empty caches the chosen strategy compiles for seconds: the stand-in serves the first call.
        self.assertFalse(facts["first_settled"], facts)
        self.assertEqual(facts["first_strategy"], stand_in)
        self.assertTrue(facts["settled"], facts)
        self.assertEqual(facts["strategy_after"], chosen)

    def check_gradients(self, facts, outputs):
        for name in ("first", "late", "after"):
            for what, error in zip(outputs, facts[name]):
                with self.subTest(call=name, output=what):
                    self.assertLess(error, 1e-5)

    def test_hmm_log_partition_and_gradients_across_the_switch(self):
        facts = self.run_child("hmm-log")
        self.check_first_calls(facts, "stepped", "stepped")
        self.check_gradients(facts, ("score", "emissions", "transitions", "initial"))

    def test_crf_log_partition_and_marginals_across_the_switch(self):
        facts = self.run_child("crf-chunked")
        # The stand-in serves a forward that saves nothing; a training call waits for the chunks, whose `saved` the
        # sequential kernels lay out otherwise.
        self.assertFalse(facts["nograd_settled"], facts)
        self.assertEqual(facts["nograd_strategy"], "sequential")
        self.assertLess(facts["nograd"], 1e-5)
        self.assertTrue(facts["settled_after_first"], facts)
        self.assertEqual(facts["first_strategy"], "chunked")
        self.check_gradients(facts, ("score", "potentials"))

    def test_sequential_crf_log_partition_and_marginals_across_the_switch(self):
        facts = self.run_child("crf-sequential")
        self.check_first_calls(facts, "sequential", "sequential")
        self.check_gradients(facts, ("score", "potentials"))

    def check_viterbi(self, case, strategy):
        facts = self.run_child(case)
        self.check_first_calls(facts, strategy, strategy)
        self.assertTrue(facts["first"])
        self.assertTrue(facts["after"])
        self.assertLess(facts["scores_agree"], 1e-6)

    def test_sequential_viterbi_paths_across_the_switch(self):
        self.check_viterbi("hmm-viterbi-sequential", "sequential")

    def test_viterbi_paths_across_the_switch(self):
        self.check_viterbi("hmm-viterbi", "stepped")

    def test_logbmm_training_step_across_the_switch(self):
        facts = self.run_child("logbmm")
        self.assertFalse(facts["first_settled"], facts)
        self.assertIn("_tiled_", facts["first_kernel"])
        self.assertTrue(facts["settled"], facts)
        self.assertIn("_exp_matmul_", facts["kernel_after"])
        self.check_gradients(facts, ("out", "grad_a", "grad_b"))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        sys.exit(0)
    sys.exit(gpu_main())
