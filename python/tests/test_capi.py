"""The Python package over the C ABI, where no GPU or torch is needed: import, the reference, error mapping."""

import array
import math
import os
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jitbmm  # noqa: E402


def buffer(typecode, values):
    a = array.array(typecode, values)
    address, _ = a.buffer_info()
    return a, address


class CApiTest(unittest.TestCase):
    def test_imports_without_torch_and_reports_version(self):
        code = "import sys, jitbmm; assert 'torch' not in sys.modules; print(jitbmm.version())"
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        version = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
        self.assertRegex(version.stdout.strip(), r"^\d+\.\d+\.\d+$")
        self.assertEqual(version.stdout.strip(), jitbmm.version())

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

    @unittest.skipUnless(os.environ.get("JITBMM_LIBCUDA") == "/nonexistent/libcuda.so.1",
                         "run with JITBMM_LIBCUDA=/nonexistent/libcuda.so.1 to force the no-driver path")
    def test_no_driver_is_a_clear_error(self):
        with self.assertRaisesRegex(jitbmm.NoDriverError, "no CUDA driver found"):
            jitbmm.Plan(jitbmm.Problem("log", "f32", 2, 3, 4, 5))

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
