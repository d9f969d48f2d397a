"""`python -m poss_core.bench ...`: see poss_core.bench.cli."""

import sys

from .cli import main

sys.exit(main())
