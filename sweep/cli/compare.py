"""``python -m sweep.cli.compare``: regression check between two result sets
(``sweep.report.regression``)."""

import sys

from ..common.entry import entry
from ..report.regression import main

if __name__ == "__main__":
    sys.exit(entry(main))
