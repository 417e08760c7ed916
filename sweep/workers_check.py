"""``python -m sweep.workers_check``: a several-worker study against a one-worker one
(``sweep.report.workers_check``)."""

import sys

from .report.workers_check import main

if __name__ == "__main__":
    sys.exit(main())
