"""``python -m sweep.cli.compare``: regression check between two result sets
(``sweep.report.regression``)."""

import sys

from ..report.regression import main
from . import entry

if __name__ == "__main__":
    sys.exit(entry(main))
