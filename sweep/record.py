"""``python -m sweep.record``: bundle finished studies into a reference record (``sweep.report.record``)."""

import sys

from .report.record import main

if __name__ == "__main__":
    sys.exit(main())
