"""``python -m jitbmm ...``: the same as the ``jitbmm`` command."""

import sys

from jitbmm._cli import main

sys.exit(main())
