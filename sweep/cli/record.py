"""``python -m sweep.cli.record``: bundle finished studies into a reference record
(``sweep.report.records``)."""

import sys

from ..report.records import main
from . import entry

if __name__ == "__main__":
    sys.exit(entry(main))
