"""`python -m swapd.daemon.cli`: the `swapd` command."""

import sys

from .command import main

sys.exit(main())
