"""jitbmm.torch without torch: a clear ImportError naming PyTorch. Runs everywhere (torch installed or not): the
child process blocks the torch import itself."""

import subprocess
import sys
import unittest

import package_under_test


class WithoutTorchTest(unittest.TestCase):
    def test_jitbmm_torch_says_it_needs_pytorch(self):
        # sys.modules["torch"] = None makes "import torch" raise ImportError, as on a machine without torch.
        code = (
            "import sys\n"
            "sys.modules['torch'] = None\n"
            "import jitbmm\n"
            "try:\n"
            "    import jitbmm.torch\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n"
            "else:\n"
            "    print('imported without torch')\n"
        )
        env = package_under_test.child_env()
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        self.assertRegex(run.stdout, r"ImportError: jitbmm.torch needs PyTorch \(pip install torch\)")

    def test_the_jitbmm_package_imports_without_torch(self):
        code = "import sys; sys.modules['torch'] = None; import jitbmm; print(jitbmm.version())"
        env = package_under_test.child_env()
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        self.assertRegex(run.stdout.strip(), r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
    unittest.main()
