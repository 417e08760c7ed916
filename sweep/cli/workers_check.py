"""``python -m sweep.cli.workers_check``: a several-worker study against a one-worker one
(``sweep.report.workers_scaling``)."""

import sys

from ..common.entry import entry
from ..report.workers_scaling import main

if __name__ == "__main__":
    sys.exit(entry(main))
