"""``python -m ncl.reproduce``: the reproduction grid (``--help``), or ``slurm`` templates."""

import sys

from ncl.reproduce.cli import main

sys.exit(main())
