"""The Python package over the C ABI, where no GPU or torch is needed: import, the reference, error mapping."""

import array
import math
import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

import package_under_test  # noqa: E402

package_under_test.import_path()
import jitbmm  # noqa: E402


def buffer(typecode, values):
    a = array.array(typecode, values)
    address, _ = a.buffer_info()
    return a, address


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

    def test_enum_values_are_the_c_headers(self):
        header = (package_under_test.SOURCE_ROOT / "include" / "jitbmm" / "c_api.h").read_text()
        values = {name: int(v) for name, v in re.findall(r"\b(JITBMM_[A-Z_]+) = (\d+)", header)}
        self.assertEqual(values["JITBMM_BACKWARD_MARGINAL"], jitbmm._BACKWARD_MARGINAL)
        self.assertEqual(values["JITBMM_BACKWARD_ARGMAX_SCATTER"], jitbmm._BACKWARD_ARGMAX_SCATTER)
        self.assertEqual(values["JITBMM_OK"], 0)
        self.assertEqual(jitbmm._STATUS_ERRORS, {values["JITBMM_INVALID_ARGUMENT"]: ValueError,
                                                 values["JITBMM_NO_DRIVER"]: jitbmm.NoDriverError,
                                                 values["JITBMM_CUDA_ERROR"]: jitbmm.CudaError,
                                                 values["JITBMM_COMPILE_ERROR"]: jitbmm.CompileError})

    def test_reference_log_semiring_and_edge_cases(self):
        # a = [[0, log 3], [-inf, -inf]], b = [[0], [0]]: out = [log 4, -inf]
        a, pa = buffer("f", [0.0, math.log(3.0), -math.inf, -math.inf])
        b, pb = buffer("f", [0.0, 0.0])
        out, po = buffer("d", [0.0, 0.0])
        jitbmm.reference(jitbmm.Problem("log", "f32", 1, 2, 2, 1), pa, pb, po)
        self.assertAlmostEqual(out[0], math.log(4.0), places=6)
        self.assertEqual(out[1], -math.inf)

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

    def test_choices_export_and_malformed_imports(self):
        # Nothing planned in this process: nothing to share. A malformed import names its line (checked before any
        # device is looked at) and a non-string is a TypeError; the round trip is in tests/fake_driver.
        self.assertEqual(jitbmm.export_choices(), "")
        with self.assertRaisesRegex(ValueError, "choices: line 2"):
            jitbmm.import_choices("\nchoice forward log f32 | nonsense\n")
        with self.assertRaisesRegex(TypeError, "text"):
            jitbmm.import_choices(b"choice")

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
