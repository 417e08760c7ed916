"""``python -m sweep.cli.bench``: the zoo's decode path against its peers and each kernel against
its roofline (``sweep.measure.benchmark``)."""

import sys

from ..measure.benchmark import main
from . import entry

if __name__ == "__main__":
    sys.exit(entry(main))
