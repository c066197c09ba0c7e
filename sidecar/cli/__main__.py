"""``python -m sidecar.cli``: the command line, as the console script and the worker processes start it."""

import sys

from sidecar.cli import main

sys.exit(main())
