"""``python -m sweep.cli.compare_fronts``: the Pareto fronts of several studies compared
(``sweep.report.fronts``)."""

import sys

from ..common.entry import entry
from ..report.fronts import main

if __name__ == "__main__":
    sys.exit(entry(main))
