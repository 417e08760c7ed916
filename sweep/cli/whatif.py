"""``python -m sweep.cli.whatif``: a measured study's designs predicted on other hardware
(``sweep.report.other_hardware``); ``--check-public`` / ``--fit-public``: the targets checked
against public measurements and fitted on them (``sweep.report.public_check``)."""

import sys

from ..common.entry import entry

PUBLIC = {"--check-public", "--fit-public"}


def main(argv: list[str] | None = None) -> int:
    """Run the what-if report, or the public-measurements check or fit when ``argv`` names one
    of ``PUBLIC``; returns the exit code."""
    if PUBLIC & set(sys.argv[1:] if argv is None else argv):
        from ..report.public_check import main as run
    else:
        from ..report.other_hardware import main as run
    return run(argv)


if __name__ == "__main__":
    sys.exit(entry(main))
