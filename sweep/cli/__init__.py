"""The command-line entry points besides the study (``python -m sweep``), one module per command,
each a thin entry to the layer that does the work:

- ``python -m sweep.cli.install``: install designzoo with the torch build for this machine;
- ``python -m sweep.cli.calibrate``: the performance model's calibration of this device;
- ``python -m sweep.cli.bench``: the zoo's decode path against peers and each kernel's roofline;
- ``python -m sweep.cli.compare_fronts``, ``compare``, ``whatif``, ``advise``, ``record``,
  ``workers_check``: the reports of ``sweep.report`` and the design advisor.

May import: everything below it. ``install`` imports the standard library only (it runs before
anything is installed). Each command ends on bad input as ``sweep.common.entry`` says.
"""

