"""``python -m sweep.cli.whatif``: a measured study's designs predicted on other hardware
(``sweep.report.other_hardware``); ``--check-public`` / ``--fit-public``: the targets checked
against public measurements and fitted on them (``sweep.report.public_check``)."""

import sys

from . import entry

if __name__ == "__main__":
    if {"--check-public", "--fit-public"} & set(sys.argv[1:]):
        from ..report.public_check import main
    else:
        from ..report.other_hardware import main
    sys.exit(entry(main))
