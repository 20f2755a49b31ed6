"""The ``jitbmm`` command of an installed wheel: runs the CLI binary that the wheel puts beside this package's
library (``jitbmm/jitbmm-cli``), so that both find the pip NVRTC the same way (``site-packages/nvidia/...``)."""

import os
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parent / "jitbmm-cli"


def main():
    if not os.access(CLI, os.X_OK):
        sys.stderr.write(f"jitbmm: the command-line tool is missing from this installation ({CLI}); "
                         "reinstall jitbmm, or build it from source (scripts/build)\n")
        return 2
    os.execv(CLI, ["jitbmm"] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
