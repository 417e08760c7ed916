"""``python -m sweep.compare``: regression check between two result sets (``sweep.report.compare``)."""

import sys

from .report.compare import main

if __name__ == "__main__":
    sys.exit(main())
