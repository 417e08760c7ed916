"""The command-line entry points besides the study (``python -m sweep``), one module per command,
each a thin entry to the layer that does the work:

- ``python -m sweep.cli.install``: install designzoo with the torch build for this machine;
- ``python -m sweep.cli.calibrate``: the performance model's calibration of this device;
- ``python -m sweep.cli.bench``: the zoo's decode path against peers and each kernel's roofline;
- ``python -m sweep.cli.compare_fronts``, ``compare``, ``whatif``, ``advise``, ``record``,
  ``workers_check``: the reports of ``sweep.report`` and the design advisor.

May import: everything below it. ``install`` imports the standard library only (it runs before
anything is installed).
"""


def entry(main) -> int:
    """Run a command's ``main()``: a missing or wrong input (a path that is not a study folder, a
    bad value) ends with one ``error:`` line and exit code 2, never a traceback."""
    import sys

    try:
        return main()
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
