"""``python -m sweep.cli.bench``: the zoo's decode path against its peers and each kernel against
its roofline (``sweep.measure.benchmark``)."""

import sys

from ..common.entry import entry
from ..measure.benchmark import main

if __name__ == "__main__":
    sys.exit(entry(main))
