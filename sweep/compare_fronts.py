"""``python -m sweep.compare_fronts``: the Pareto fronts of several studies compared
(``sweep.report.compare_fronts``)."""

import sys

from .report.compare_fronts import main

if __name__ == "__main__":
    sys.exit(main())
