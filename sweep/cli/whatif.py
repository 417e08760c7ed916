"""``python -m sweep.cli.whatif``: a measured study's designs predicted on other hardware
(``sweep.report.other_hardware``)."""

import sys

from ..report.other_hardware import main
from . import entry

if __name__ == "__main__":
    sys.exit(entry(main))
