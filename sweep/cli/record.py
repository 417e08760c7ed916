"""``python -m sweep.cli.record``: bundle finished studies into a reference record
(``sweep.report.records``)."""

import sys

from ..common.entry import entry
from ..report.records import main

if __name__ == "__main__":
    sys.exit(entry(main))
