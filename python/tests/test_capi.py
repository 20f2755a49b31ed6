"""The Python package over the C ABI, where no GPU or torch is needed: import, the reference, error mapping."""

import array
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import package_under_test  # noqa: E402

package_under_test.import_path()
import jitbmm  # noqa: E402


def buffer(typecode, values):
    a = array.array(typecode, values)
    address, _ = a.buffer_info()
    return a, address


def run_on_fake_driver(code, timeout=120, **env):
    """What a child process running `code` on the fake driver prints (the environment `env` on top of it, no disk
    cache, no tuning), after checking that the child exited 0."""
    env = package_under_test.child_env(JITBMM_LIBCUDA=os.environ["JITBMM_TEST_FAKE_LIBCUDA"], JITBMM_CACHE="off",
                                       JITBMM_TUNE="never", **env)
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert child.returncode == 0, child.stderr
    return child.stdout


def plan_error_in_child(error, **env):
    """What a child process planning a small product on the fake driver prints when jitbmm.<error> is raised."""
    return run_on_fake_driver("import jitbmm\n"
                              "try:\n"
                              "    jitbmm.Plan(jitbmm.Problem('log', 'f32', 2, 3, 4, 5))\n"
                              f"except jitbmm.{error} as e:\n"
                              f"    print('{error}:', e)\n", **env)


# A case that runs child processes on the fake driver.
needs_fake_driver = unittest.skipUnless(os.environ.get("JITBMM_TEST_FAKE_LIBCUDA"),
                                        "set JITBMM_TEST_FAKE_LIBCUDA to libjitbmm_fake_cuda.so (ctest does)")


class CApiTest(unittest.TestCase):
    def test_imports_without_torch_and_reports_version(self):
        code = "import sys, jitbmm; assert 'torch' not in sys.modules; print(jitbmm.version())"
        version = subprocess.run([sys.executable, "-c", code], env=package_under_test.child_env(), check=True,
                                 capture_output=True, text=True)
        self.assertRegex(version.stdout.strip(), r"^\d+\.\d+\.\d+$")
        self.assertEqual(version.stdout.strip(), jitbmm.version())

    def test_version_is_the_librarys(self):
        self.assertEqual(jitbmm.__version__, jitbmm.version())
        header = (package_under_test.SOURCE_ROOT / "include" / "jitbmm" / "version.hpp").read_text()
        self.assertIn(f'kVersion = "{jitbmm.__version__}"', header)

    @unittest.skipUnless(package_under_test.INSTALLED, "the source tree's package is under test")
    def test_the_installed_package_is_not_the_source_trees(self):
        package = Path(jitbmm.__file__).resolve().parent
        self.assertFalse(package.is_relative_to(package_under_test.SOURCE_ROOT), package)
        self.assertNotIn("JITBMM_LIBRARY", os.environ)
        self.assertEqual(Path(jitbmm._library()._name).resolve().parent, package)

    def test_tables_are_the_c_abis(self):
        lib = jitbmm._library()
        n = lib.jitbmm_semiring_count()
        self.assertEqual(jitbmm.SEMIRINGS, tuple(lib.jitbmm_semiring_name(i).decode() for i in range(n)))
        self.assertEqual(jitbmm.SEMIRINGS, ("log", "max_plus", "min_plus", "max_times", "plus_times"))
        self.assertEqual(jitbmm._SEMIRING_BACKWARD, {s: lib.jitbmm_semiring_backward(i)
                                                     for i, s in enumerate(jitbmm.SEMIRINGS)})
        # The selecting semirings report argmax and send the gradient through it.
        for i, s in enumerate(jitbmm.SEMIRINGS):
            self.assertEqual(lib.jitbmm_semiring_has_argmax(i) == 1,
                             jitbmm._SEMIRING_BACKWARD[s] == jitbmm._BACKWARD_ARGMAX_SCATTER, s)
        n = lib.jitbmm_dtype_count()
        self.assertEqual(jitbmm.DTYPES, tuple(lib.jitbmm_dtype_name(i).decode() for i in range(n)))
        self.assertEqual(jitbmm.DTYPES, ("f32", "f64", "f16", "bf16"))
        self.assertEqual([lib.jitbmm_dtype_size(i) for i in range(n)], [4, 8, 2, 2])
        for bad in (-1, 99):
            self.assertIsNone(lib.jitbmm_semiring_name(bad))
            self.assertEqual(lib.jitbmm_semiring_backward(bad), -1)
            self.assertIsNone(lib.jitbmm_dtype_name(bad))
            self.assertEqual(lib.jitbmm_dtype_size(bad), -1)
        self.assertIn("SEMIRINGS", jitbmm.__all__)
        self.assertIn("DTYPES", jitbmm.__all__)

    def test_chain_problem_struct_is_the_c_abis(self):
        # The problem is checked before any device is asked for, so a field at the wrong offset shows without a GPU:
        # each bad value must come back named as the field it was written to.
        lib = jitbmm._library()
        plan = jitbmm.ctypes.c_void_p()
        problem = jitbmm._CChainProblem(b"log", b"f32", 2, 3, 4, (0, 0, 0, 0), 0, b"markov")
        with self.assertRaisesRegex(ValueError, "problem.form: 'markov'"):
            jitbmm._check(lib.jitbmm_chain_plan_create(jitbmm.ctypes.byref(problem), jitbmm.ctypes.byref(plan)))
        for field, size in (("emission_strides", 3), ("transition_strides", 3), ("initial_strides", 2)):
            problem = jitbmm._CChainProblem(b"log", b"f32", 2, 3, 4, (0, 0, 0, 0), 0, b"hmm", 1, 1)
            getattr(problem, field)[size - 1] = -1
            with self.assertRaisesRegex(ValueError, r"chain\.%s\[%d\]" % (field, size - 1)):
                jitbmm._check(lib.jitbmm_chain_plan_create(jitbmm.ctypes.byref(problem), jitbmm.ctypes.byref(plan)))

    def test_chain_expectation_refuses_what_it_does_not_compute_before_any_device(self):
        lib = jitbmm._library()
        plan = jitbmm.ctypes.c_void_p()
        for semiring, C, form, field in ((b"max_plus", 4, b"crf", "chain.semiring"), (b"log", 1025, b"crf", "chain.C"),
                                         (b"log", 1025, b"hmm", "chain.C")):
            problem = jitbmm._CChainProblem(semiring, b"f32", 2, 3, C, (0, 0, 0, 0), 0, form)
            with self.assertRaisesRegex(ValueError, field):
                jitbmm._check(lib.jitbmm_chain_expectation_create(jitbmm.ctypes.byref(problem), 0,
                                                                   jitbmm.ctypes.byref(plan)))
            self.assertIsNone(plan.value)
        problem = jitbmm._CChainProblem(b"log", b"f32", 2, 3, 4, (0, 0, 0, 0), 0)
        for field in (-1, 3):
            with self.assertRaisesRegex(ValueError, "field"):
                jitbmm._check(lib.jitbmm_chain_expectation_create(jitbmm.ctypes.byref(problem), field,
                                                                   jitbmm.ctypes.byref(plan)))
            self.assertIsNone(plan.value)
        with self.assertRaisesRegex(ValueError, "plan"):
            jitbmm._check(lib.jitbmm_chain_expectation_create(jitbmm.ctypes.byref(problem), 0, None))

    def test_enum_values_are_the_c_headers(self):
        header = (package_under_test.SOURCE_ROOT / "include" / "jitbmm" / "c_api.h").read_text()
        values = {name: int(v) for name, v in re.findall(r"\b(JITBMM_[A-Z_]+) = (\d+)", header)}
        self.assertEqual(values["JITBMM_BACKWARD_MARGINAL"], jitbmm._BACKWARD_MARGINAL)
        self.assertEqual(values["JITBMM_BACKWARD_ARGMAX_SCATTER"], jitbmm._BACKWARD_ARGMAX_SCATTER)
        self.assertEqual(values["JITBMM_OK"], 0)
        self.assertEqual(jitbmm._STATUS_ERRORS, {values["JITBMM_INVALID_ARGUMENT"]: ValueError,
                                                 values["JITBMM_NO_DRIVER"]: jitbmm.NoDriverError,
                                                 values["JITBMM_CUDA_ERROR"]: jitbmm.CudaError,
                                                 values["JITBMM_COMPILE_ERROR"]: jitbmm.CompileError,
                                                 values["JITBMM_NO_NVRTC"]: jitbmm.NoNvrtcError,
                                                 values["JITBMM_UNSUPPORTED_DEVICE"]: jitbmm.UnsupportedDeviceError})
        self.assertEqual(values["JITBMM_INTERNAL_ERROR"], 5)  # appended after it: the old values stay
        self.assertEqual(values["JITBMM_NO_NVRTC"], 6)
        self.assertEqual(values["JITBMM_UNSUPPORTED_DEVICE"], 7)
        for name in ("NoDriverError", "NoNvrtcError", "UnsupportedDeviceError", "CudaError", "CompileError"):
            self.assertIn(name, jitbmm.__all__)
            self.assertTrue(issubclass(getattr(jitbmm, name), jitbmm.JitbmmError), name)

    def test_reference_log_semiring_and_edge_cases(self):
        # a = [[0, log 3], [-inf, -inf]], b = [[0], [0]]: out = [log 4, -inf]
        a, pa = buffer("f", [0.0, math.log(3.0), -math.inf, -math.inf])
        b, pb = buffer("f", [0.0, 0.0])
        out, po = buffer("d", [0.0, 0.0])
        jitbmm.reference(jitbmm.Problem("log", "f32", 1, 2, 2, 1), pa, pb, po)
        self.assertAlmostEqual(out[0], math.log(4.0), places=6)
        self.assertEqual(out[1], -math.inf)

    def test_reference_empty_dimensions(self):
        # K = 0: every output is the semiring's zero and its argmax -1; a and b may be null (they hold nothing).
        zeros = {"log": -math.inf, "max_plus": -math.inf, "min_plus": math.inf, "max_times": 0.0, "plus_times": 0.0}
        self.assertEqual(set(zeros), set(jitbmm.SEMIRINGS))
        for semiring, zero in zeros.items():
            for dtype in jitbmm.DTYPES:
                with self.subTest(semiring=semiring, dtype=dtype):
                    argmax = semiring in ("max_plus", "min_plus", "max_times")
                    out, po = buffer("d", [7.0] * 6)
                    arg, pg = buffer("i", [7] * 6)
                    p = jitbmm.Problem(semiring, dtype, 2, 3, 0, 1, with_argmax=argmax)
                    jitbmm.reference(p, None, None, po, pg if argmax else None)
                    self.assertEqual(list(out), [zero] * 6)
                    if argmax:
                        self.assertEqual(list(arg), [-1] * 6)
        # No output (B, M or N = 0, with or without K): nothing is written and every buffer may be null.
        for shape in ((0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 4, 0), (0, 0, 0, 0), (2, 0, 0, 5)):
            with self.subTest(shape=shape):
                p = jitbmm.Problem("max_plus", "f32", *shape, with_argmax=True)
                jitbmm.reference(p, None, None, None, None)
                self.assertEqual(p.out_strides, (shape[1] * shape[3], shape[3], 1))

    @unittest.skipUnless(os.environ.get("JITBMM_LIBCUDA") == "/nonexistent/libcuda.so.1",
                         "run with JITBMM_LIBCUDA=/nonexistent/libcuda.so.1 to force the no-driver path")
    def test_empty_problems_still_need_a_device_for_a_plan(self):
        # A plan is for a device even when it launches nothing: without a driver, every shape says so alike.
        for shape in ((0, 3, 4, 5), (2, 3, 0, 5), (2, 0, 4, 0)):
            with self.subTest(shape=shape), self.assertRaises(jitbmm.NoDriverError):
                jitbmm.Plan(jitbmm.Problem("log", "f32", *shape))
        with self.assertRaises(jitbmm.NoDriverError):  # so does building a plan's kernels ahead
            jitbmm.prepare(jitbmm.Problem("log", "f32", 2, 3, 4, 5))

    def test_prepare_checks_its_arguments_before_any_device(self):
        with self.assertRaisesRegex(TypeError, "problem: expected a jitbmm.Problem"):
            jitbmm.prepare("log")
        for name in ("grad_a", "grad_b"):
            with self.subTest(name=name), self.assertRaisesRegex(TypeError, name + ": expected True or False"):
                jitbmm.prepare(jitbmm.Problem("log", "f32", 2, 3, 4, 5), **{name: "yes"})

    def test_reference_max_plus_argmax_ties_take_the_smallest_k(self):
        a, pa = buffer("d", [1.0, 3.0, 3.0])
        b, pb = buffer("d", [0.0, 0.0, 0.0])
        out, po = buffer("d", [0.0])
        arg, pg = buffer("i", [7])
        jitbmm.reference(jitbmm.Problem("max_plus", "f64", 1, 1, 3, 1, with_argmax=True), pa, pb, po, pg)
        self.assertEqual(out[0], 3.0)
        self.assertEqual(arg[0], 1)

    def test_bad_arguments_raise_value_error_naming_them(self):
        with self.assertRaisesRegex(ValueError, "semiring"):
            jitbmm.Problem("sum", "f32", 1, 1, 1, 1)
        with self.assertRaisesRegex(ValueError, "dtype"):
            jitbmm.Problem("log", "int32", 1, 1, 1, 1)
        with self.assertRaisesRegex(ValueError, "shape.K"):
            jitbmm.reference(jitbmm.Problem("log", "f32", 1, 1, -1, 1), 0, 0, 0)
        with self.assertRaisesRegex(ValueError, "out: null"):
            a, pa = buffer("f", [0.0])
            jitbmm.reference(jitbmm.Problem("log", "f32", 1, 1, 1, 1), pa, pa, 0)

    def test_reference_takes_addresses_and_refuses_buffers_in_one_line(self):
        # A buffer where its address goes: a TypeError naming the argument, its value cut short.
        a, pa = buffer("f", [0.0] * 4)
        for bad in ([0.0] * 100000, a, "0x10"):
            with self.subTest(kind=type(bad).__name__), self.assertRaises(TypeError) as caught:
                jitbmm.reference(jitbmm.Problem("log", "f32", 1, 2, 2, 1), bad, pa, pa)
            message = str(caught.exception)
            self.assertTrue(message.startswith("a_ptr: expected an integer in [0, 18446744073709551615], got "), message)
            self.assertLess(len(message), 200, message)

    def test_precision_fast_is_for_the_log_semiring_only(self):
        out, po = buffer("d", [0.0])
        a, pa = buffer("f", [1.0])
        jitbmm.reference(jitbmm.Problem("log", "f32", 1, 1, 1, 1, precision="fast"), pa, pa, po)
        with self.assertRaisesRegex(ValueError, "precision: fast is for the log semiring only, not max_plus"):
            jitbmm.reference(jitbmm.Problem("max_plus", "f32", 1, 1, 1, 1, precision="fast"), pa, pa, po)

    def test_strides_must_be_three_non_negative_integers(self):
        for bad in ((6, 3), (6, 3, 1, 0), (), 6, "631", None.__class__):
            with self.subTest(strides=bad), self.assertRaisesRegex((ValueError, TypeError),
                                                                   r"a_strides: expected 3 non-negative integers "
                                                                   r"\(batch, row, col\), got "):
                jitbmm.Problem("log", "f32", 2, 2, 3, 1, a_strides=bad)
        with self.assertRaisesRegex(ValueError, r"a_strides: expected 3 non-negative integers \(batch, row, col\), "
                                                r"got \(6, 3\)"):
            jitbmm.Problem("log", "f32", 2, 2, 3, 1, a_strides=(6, 3))
        for bad in ((6, 3, True), (6.0, 3, 1), (6, -3, 1), (2**63, 3, 1)):
            with self.subTest(strides=bad), self.assertRaisesRegex((ValueError, TypeError), "b_strides"):
                jitbmm.Problem("log", "f32", 2, 2, 3, 1, b_strides=bad)
        with self.assertRaisesRegex(ValueError, "out_strides"):
            jitbmm.Problem("log", "f32", 2, 2, 3, 1, out_strides=[2, 1])
        p = jitbmm.Problem("log", "f32", 2, 2, 3, 1, a_strides=[0, 3, 1], b_strides=(3, 1, 1))
        self.assertEqual((p.a_strides, p.b_strides, p.out_strides), ((0, 3, 1), (3, 1, 1), (2, 1, 1)))
        # A set's or a mapping's order is not the caller's: refused, as a generator's unknown length is.
        for bad in ({12, 4, 1}, {12: 0, 4: 0, 1: 0}, (x for x in (12, 4, 1))):
            with self.subTest(strides=type(bad).__name__), self.assertRaisesRegex(TypeError, "a_strides"):
                jitbmm.Problem("log", "f32", 2, 3, 4, 5, a_strides=bad)

    def test_every_assignment_is_checked(self):
        p = jitbmm.Problem("log", "f32", 2, 3, 4, 5)
        cases = [("shape", (2**64 + 2, 3, 4, 5), ValueError, "shape.B: expected an integer"),
                 ("shape", (2, 3, -4, 5), ValueError, "shape.K: expected an integer"),
                 ("shape", (2, 3.0, 4, 5), TypeError, "shape.M: expected an integer"),
                 ("shape", (2, 3, 4), ValueError, r"shape: expected 4 integers \(B, M, K, N\)"),
                 ("shape", "2345", TypeError, "shape: expected 4 integers"),
                 ("shape", 7, TypeError, "shape: expected 4 integers"),
                 ("shape", (1, 2**40, 2**40, 1), ValueError, r"shape.M \* shape.K = .* does not fit int64"),
                 ("a_strides", (1, 2), ValueError, r"a_strides: expected 3 non-negative integers"),
                 ("b_strides", (1, 2, -1), ValueError, "b_strides"),
                 ("out_strides", (1, 2, 2**63), ValueError, "out_strides"),
                 ("out_strides", (1, 2, True), TypeError, "out_strides"),
                 ("semiring", "sum", ValueError, "semiring: unsupported 'sum'"),
                 ("dtype", "int32", ValueError, "dtype: unsupported"),
                 ("out_dtype", "float", ValueError, "out_dtype: unsupported"),
                 ("precision", "rough", ValueError, "precision: unsupported"),
                 ("with_argmax", 1.0, TypeError, "with_argmax: expected True or False")]
        for name, bad, error, message in cases:
            with self.subTest(**{name: bad}):
                before = getattr(p, name)
                with self.assertRaisesRegex(error, message):
                    setattr(p, name, bad)
                self.assertEqual(getattr(p, name), before)  # a refused value leaves the attribute as it was
        # What reaches C is what was checked: the shape and strides assigned, not a wrapped or padded version.
        p.shape = (2, 3, 4, 5)
        p.a_strides = [13, 4, 1]
        c = p._c()
        self.assertEqual((c.B, c.M, c.K, c.N), (2, 3, 4, 5))
        self.assertEqual(list(c.a_strides), [13, 4, 1])
        self.assertEqual(p.a_strides, (13, 4, 1))
        # Strides left to the default follow the shape; given ones stay; None returns to the default.
        p.shape = (1, 6, 7, 8)
        self.assertEqual((p.a_strides, p.b_strides, p.out_strides), ((13, 4, 1), (56, 8, 1), (48, 8, 1)))
        p.a_strides = None
        self.assertEqual(p.a_strides, (42, 7, 1))
        # A default stride that cannot fit the new shape is the shape's fault; given strides spare the check.
        with self.assertRaisesRegex(ValueError, r"shape.K \* shape.N = .* does not fit int64"):
            p.shape = (1, 1, 2**40, 2**40)
        p.b_strides = (0, 1, 1)
        p.shape = (1, 1, 2**40, 2**40)
        self.assertEqual(p.shape, (1, 1, 2**40, 2**40))
        # A value written around the properties is still refused before it reaches C.
        p._shape = (2**64 + 2, 1, 1, 1)
        with self.assertRaisesRegex(ValueError, "shape.B: expected an integer"):
            p._c()

    def test_strides_given_are_the_strides_used(self):
        # a is 2x3 stored column-major: strides (6, 1, 2); the reference must read it that way, not pad or drop.
        a, pa = buffer("d", [1.0, 4.0, 2.0, 5.0, 3.0, 6.0])  # a = [[1, 2, 3], [4, 5, 6]]
        b, pb = buffer("d", [1.0, 1.0, 1.0])
        out, po = buffer("d", [0.0, 0.0])
        jitbmm.reference(jitbmm.Problem("plus_times", "f64", 1, 2, 3, 1, a_strides=(6, 1, 2)), pa, pb, po)
        self.assertEqual(list(out), [6.0, 15.0])

    def test_sizes_must_be_int64_integers(self):
        for name, bad, error in (("B", 2**64 + 2, ValueError), ("M", 2**63, ValueError), ("K", -1, ValueError),
                                 ("N", 2.0, TypeError), ("B", True, TypeError), ("M", "2", TypeError),
                                 ("K", None, TypeError)):
            sizes = dict(B=1, M=1, K=1, N=1)
            sizes[name] = bad
            with self.subTest(**{name: bad}), self.assertRaisesRegex(error, f"shape.{name}: expected an integer"):
                jitbmm.Problem("log", "f32", **sizes)
        with self.assertRaisesRegex(ValueError, r"shape.M \* shape.K = .* does not fit int64"):
            jitbmm.Problem("log", "f32", 1, 2**40, 2**40, 1)
        self.assertEqual(jitbmm.Problem("log", "f32", 2**62, 1, 1, 1).shape, (2**62, 1, 1, 1))

    def test_names_and_flags_are_checked_before_ctypes(self):
        with self.assertRaisesRegex(ValueError, "semiring"):
            jitbmm.Problem(b"log", "f32", 1, 1, 1, 1)
        with self.assertRaisesRegex(ValueError, "dtype"):
            jitbmm.Problem("log", "f32\0", 1, 1, 1, 1)
        with self.assertRaisesRegex(ValueError, "out_dtype"):
            jitbmm.Problem("log", "f32", 1, 1, 1, 1, out_dtype="float")
        with self.assertRaisesRegex(ValueError, "precision"):
            jitbmm.Problem("log", "f32", 1, 1, 1, 1, precision="exact\0")
        with self.assertRaisesRegex(TypeError, "with_argmax"):
            jitbmm.Problem("max_plus", "f32", 1, 1, 1, 1, with_argmax="no")
        with self.assertRaisesRegex(ValueError, "policy"):
            jitbmm.set_tune_policy("never\0junk")
        with self.assertRaisesRegex(ValueError, "policy"):
            jitbmm.set_tune_policy(1)
        with self.assertRaisesRegex(TypeError, "problem"):
            jitbmm.reference((1, 1, 1, 1), 0, 0, 0)
        with self.assertRaisesRegex(TypeError, "problem"):
            jitbmm.Plan("log")

    def test_pointers_must_fit_64_bits(self):
        p = jitbmm.Problem("log", "f32", 1, 1, 1, 1)
        a, pa = buffer("f", [0.0])
        out, po = buffer("d", [0.0])
        for name, bad, error in (("a_ptr", 2**64 + pa, ValueError), ("a_ptr", -1, ValueError),
                                 ("a_ptr", float(pa), TypeError), ("a_ptr", True, TypeError)):
            with self.subTest(**{name: bad}), self.assertRaisesRegex(error, f"{name}: expected an integer"):
                jitbmm.reference(p, bad, pa, po)
        with self.assertRaisesRegex(ValueError, "out_ptr: expected an integer"):
            jitbmm.reference(p, pa, pa, 2**64 + po)
        jitbmm.reference(p, pa, pa, po)
        self.assertEqual(out[0], 0.0)

    @unittest.skipUnless(os.environ.get("JITBMM_LIBCUDA") == "/nonexistent/libcuda.so.1",
                         "run with JITBMM_LIBCUDA=/nonexistent/libcuda.so.1 to force the no-driver path")
    def test_no_driver_is_a_clear_error(self):
        with self.assertRaisesRegex(jitbmm.NoDriverError, "no CUDA driver found"):
            jitbmm.Plan(jitbmm.Problem("log", "f32", 2, 3, 4, 5))

    @needs_fake_driver
    def test_missing_nvrtc_is_no_nvrtc_error(self):
        # A driver (the fake one) but no NVRTC and no cache to load a kernel from: the plan must compile, and cannot.
        self.assertRegex(plan_error_in_child("NoNvrtcError", JITBMM_NVRTC_LIBRARY="/nonexistent/libnvrtc.so.13"),
                         r"^NoNvrtcError: no NVRTC found .*Tried:\n  could not load /nonexistent/libnvrtc.so.13")

    @needs_fake_driver
    def test_an_nvrtc_newer_than_the_driver_is_passed_over(self):
        # A CUDA 12 driver loads no CUDA 13 NVRTC's code: such an NVRTC is passed over, saying why, for a CUDA 12 one
        # (none here, where the toolkit's is 13: NoNvrtcError naming both).
        out = plan_error_in_child("NoNvrtcError", JITBMM_FAKE_CUDA_DRIVER="12080")
        if not out:
            self.skipTest("an NVRTC of CUDA 12 is installed here: it was taken")
        self.assertRegex(out, r"^NoNvrtcError: no NVRTC found .*Tried:")
        self.assertRegex(out, r"NVRTC 13\.\d+, whose code the CUDA 12 driver cannot load")
        self.assertIn("nvidia-cuda-nvrtc-cu12", out)

    @needs_fake_driver
    def test_gpu_outside_what_the_nvrtc_targets_is_unsupported_device_error(self):
        # The fake driver as a Pascal GPU, and as one newer than the NVRTC (sm_130 for NVRTC 13.0): every plan is
        # refused before it compiles, naming the device and the floor, or the NVRTC's range.
        for sm, message in (("61", r"is sm_61; jitbmm needs sm_\d+ or later with NVRTC "),
                            ("130", r"is sm_130, which NVRTC \d+\.\d+ does not compile for \(it targets sm_\d+ to "
                                    r"sm_\d+\): install a newer NVRTC")):
            with self.subTest(sm=sm):
                self.assertRegex(plan_error_in_child("UnsupportedDeviceError", JITBMM_FAKE_CUDA_SM=sm),
                                 rf"^UnsupportedDeviceError: device 0 \(Fake sm_{sm}\) " + message)

    @needs_fake_driver
    def test_empty_problems_plan_and_run_on_the_fake_driver(self):
        # Empty outputs launch nothing (every pointer may be null), and building ahead builds nothing for them; K = 0
        # has a kernel that writes the semiring's zero and reads neither operand. The fake driver runs no kernel, so
        # only the calls are checked here (values: test_torch.py on a GPU).
        code = ("import jitbmm\n"
                "for shape in ((0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 4, 0), (2, 3, 0, 5), (0, 0, 0, 0)):\n"
                "    jitbmm.prepare(jitbmm.Problem('max_plus', 'f32', *shape, with_argmax=True))\n"
                "    plan = jitbmm.Plan(jitbmm.Problem('max_plus', 'f32', *shape, with_argmax=True))\n"
                "    B, M, K, N = shape\n"
                "    out = arg = None\n"
                "    if B * M * N:\n"
                "        import ctypes\n"
                "        lib = ctypes.CDLL(__import__('os').environ['JITBMM_LIBCUDA'])\n"
                "        out, arg = ctypes.c_uint64(), ctypes.c_uint64()\n"
                "        assert lib.cuMemAlloc_v2(ctypes.byref(out), 4 * B * M * N) == 0\n"
                "        assert lib.cuMemAlloc_v2(ctypes.byref(arg), 4 * B * M * N) == 0\n"
                "        out, arg = out.value, arg.value\n"
                "    plan(None, None, out, arg)\n"
                "    print(shape, plan.workspace_bytes, plan.kernel_name)\n")
        out = run_on_fake_driver(code, timeout=300)
        lines = out.splitlines()
        self.assertEqual(len(lines), 5, out)
        for line in lines[:3] + lines[4:]:
            self.assertTrue(line.endswith(" 0 (no kernel: empty problem)"), line)
        self.assertRegex(lines[3], r"^\(2, 3, 0, 5\) 0 max_plus_f32_")

    @needs_fake_driver
    def test_a_plan_settles_on_its_chosen_variant_after_a_stand_in(self):
        # A decision taking exp_matmul, whose unit compiles for seconds (shared from a GPU like this one, so taken
        # unchecked): the plan runs a quick build of the default variant (its smallest tile) until the chosen kernel
        # is built, which Plan.settled says once
        # jitbmm.wait_for_builds() returns (a no-op before the library is loaded).
        problem = "log f32 f32 2 256 256 256 65536 256 1 65536 256 1 65536 256 1 0 exact"
        spec = ("semiring=log dtype=f32 out=f32 argmax=0 strategy=exp_matmul index64=0 tile=64x64x16 thread=4x4 "
                "min_blocks=2 math=fma")
        code = ("import jitbmm\n"
                "jitbmm.wait_for_builds()\n"
                f"jitbmm.import_choices('device sm_90 Fake H100\\nchoice forward {problem} | {spec}\\n')\n"
                "plan = jitbmm.Plan(jitbmm.Problem('log', 'f32', 2, 256, 256, 256))\n"
                "print(plan.settled, plan.kernel_name)\n"
                "jitbmm.wait_for_builds()\n"
                "print(plan.settled, plan.kernel_name)\n")
        with tempfile.TemporaryDirectory() as cache:
            env = package_under_test.child_env(JITBMM_LIBCUDA=os.environ["JITBMM_TEST_FAKE_LIBCUDA"],
                                               JITBMM_CACHE_DIR=cache, JITBMM_TUNE="never", JITBMM_STAND_IN="on")
            child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   timeout=300)
        self.assertEqual(child.returncode, 0, child.stderr)
        first, then = child.stdout.splitlines()
        self.assertRegex(first, r"^False log_f32_tiled_32x32x16_")
        self.assertRegex(then, r"^True log_f32_exp_matmul_fma_64x64x16_")

    @needs_fake_driver
    def test_chain_strategy_names_the_strategy_on_the_fake_driver(self):
        # The rule's strategies (no stored decision: no cache, no tuning): the sequential kernels for few sequences
        # or a table per sequence, the chunked strategy for one long CRF chain, the stepped one for an HMM's table
        # shared by many sequences of many states and beyond 1024 states. A size the library refuses is named.
        code = ("import jitbmm\n"
                "for args in (('log', 'f32', 2, 5, 3), ('log', 'f32', 1, 1024, 32), ('log', 'f32', 512, 64, 512, 'hmm'),\n"
                "             ('max_plus', 'f32', 512, 64, 512, 'hmm', True), ('log', 'f64', 2, 64, 2048, 'hmm')):\n"
                "    print(jitbmm.chain_strategy(*args))\n"
                "try:\n"
                "    jitbmm.chain_strategy('log', 'f32', 2, 5, 0)\n"
                "except ValueError as e:\n"
                "    print(e)\n")
        out = run_on_fake_driver(code, timeout=300)
        lines = out.splitlines()
        self.assertEqual(lines[:5], ["sequential", "chunked", "stepped", "sequential", "stepped"], out)
        self.assertRegex(lines[5], r"^chain\.C: must be in \[1, ")

    def test_chain_strategy_checks_its_arguments_before_planning(self):
        for kwargs, error, named in ((dict(semiring="min_plus"), ValueError, "semiring"),
                                     (dict(dtype=None), ValueError, "dtype"),
                                     (dict(B=True), TypeError, "B"), (dict(T=2.0), TypeError, "T"),
                                     (dict(C=2**64), ValueError, "C"), (dict(form="markov"), ValueError, "form"),
                                     (dict(batched_transitions=1.0), TypeError, "batched_transitions"),
                                     (dict(batched_transitions=True), ValueError, "batched_transitions")):
            args = {**dict(semiring="log", dtype="f32", B=2, T=5, C=3, form="crf"), **kwargs}
            with self.subTest(**kwargs), self.assertRaisesRegex(error, f"^{named}: "):
                jitbmm.chain_strategy(**args)

    @unittest.skipUnless(os.environ.get("JITBMM_LIBCUDA") == "/nonexistent/libcuda.so.1",
                         "run with JITBMM_LIBCUDA=/nonexistent/libcuda.so.1 to force the no-driver path")
    def test_chain_strategy_without_a_driver_is_no_driver_error(self):
        with self.assertRaisesRegex(jitbmm.NoDriverError, "no CUDA driver found"):
            jitbmm.chain_strategy("log", "f32", 2, 5, 3, form="hmm")

    def test_choices_export_and_malformed_imports(self):
        # Nothing planned in this process: nothing to share. A malformed import names its line (checked before any
        # device is looked at) and a non-string is a TypeError; the round trip is in tests/fake_driver.
        self.assertEqual(jitbmm.export_choices(), "")
        with self.assertRaisesRegex(ValueError, "choices: line 2"):
            jitbmm.import_choices("\nchoice forward log f32 | nonsense\n")
        with self.assertRaisesRegex(TypeError, "text"):
            jitbmm.import_choices(b"choice")
        # The C ABI would read up to a NUL and take the rest as read: refused whole.
        with self.assertRaisesRegex(ValueError, "NUL"):
            jitbmm.import_choices("\0choice forward log f32 | nonsense\n")

    @needs_fake_driver
    def test_a_plan_is_not_copied_and_keeps_its_problem(self):
        # A copy would share the C handle, destroyed with the first; the problem shown is the plan's as made.
        code = ("import copy, pickle, jitbmm\n"
                "p = jitbmm.Problem('max_plus', 'f32', 2, 3, 0, 5)\n"
                "plan = jitbmm.Plan(p)\n"
                "for f in (copy.copy, copy.deepcopy, pickle.dumps):\n"
                "    try:\n"
                "        f(plan)\n"
                "        print('copied')\n"
                "    except TypeError as e:\n"
                "        print('refused:', e)\n"
                "p.semiring = 'log'\n"
                "print(plan.problem.semiring)\n"
                "try:\n"
                "    plan.backward_workspace_bytes(grad_a='no')\n"
                "except TypeError as e:\n"
                "    print('refused:', e)\n")
        lines = run_on_fake_driver(code).splitlines()
        self.assertEqual(len(lines), 5, lines)
        for line in lines[:3]:
            self.assertRegex(line, r"^refused: a jitbmm\.Plan owns its C plan")
        self.assertEqual(lines[3], "max_plus")
        self.assertRegex(lines[4], r"^refused: grad_a: expected True or False")

    def test_an_error_naming_a_path_that_is_not_utf8_is_still_the_error(self):
        # The driver's path as the file system has it, bytes that are not UTF-8: NoDriverError, the byte escaped.
        code = ("import jitbmm\n"
                "try:\n"
                "    jitbmm.Plan(jitbmm.Problem('log', 'f32', 2, 3, 4, 5))\n"
                "except jitbmm.NoDriverError as e:\n"
                "    print('NoDriverError:', e)\n")
        env = package_under_test.child_env(JITBMM_LIBCUDA=os.fsdecode(b"/nonexistent/caf\xe9/libcuda.so.1"),
                                           JITBMM_CACHE="off")
        child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(child.returncode, 0, child.stderr)
        self.assertRegex(child.stdout, r"^NoDriverError: no CUDA driver found: could not load /nonexistent/caf\\xe9/")

    def test_a_relative_library_path_is_the_file_loaded(self):
        # JITBMM_LIBRARY relative to the working directory: the file found there is the one loaded.
        library = os.environ.get("JITBMM_LIBRARY")
        if not library:
            self.skipTest("JITBMM_LIBRARY not set")
        here = os.path.dirname(os.path.abspath(library))
        code = "import jitbmm\nprint(jitbmm.version())\n"
        env = package_under_test.child_env(JITBMM_LIBRARY=os.path.basename(library))
        child = subprocess.run([sys.executable, "-c", code], env=env, cwd=here, capture_output=True, text=True,
                               timeout=60)
        self.assertEqual(child.returncode, 0, child.stderr)
        self.assertEqual(child.stdout.strip(), jitbmm.version())

    def test_missing_library_is_a_clear_import_error(self):
        saved = (jitbmm._lib, os.environ.get("JITBMM_LIBRARY"))
        try:
            jitbmm._lib = None
            os.environ["JITBMM_LIBRARY"] = "/nonexistent/libjitbmm.so"
            with self.assertRaisesRegex(jitbmm.LibraryNotFoundError, "not found"):
                jitbmm.version()
        finally:
            jitbmm._lib = saved[0]
            if saved[1] is None:
                os.environ.pop("JITBMM_LIBRARY", None)
            else:
                os.environ["JITBMM_LIBRARY"] = saved[1]


if __name__ == "__main__":
    unittest.main()
