"""``python -m sweep.whatif``: a measured study's designs predicted on other hardware
(``sweep.report.whatif``)."""

import sys

from .report.whatif import main

if __name__ == "__main__":
    sys.exit(main())
