"""The one percentile definition of the project: linear interpolation between the closest ranks.

``percentile(values, q)`` is the ``q``-th percentile (0..100) of ``values``: sorted, the value at
rank ``h = (n - 1) q / 100`` interpolated linearly between the ranks around it (Hyndman & Fan
1996, definition 7: numpy's ``percentile`` default and R's ``quantile`` type 7). Every p10 / p90
of the project (a stage's repeats, idle gaps between kernels, prediction errors) is this one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (``0 <= q <= 100``) of ``values``, NaN for none.

    Raises:
        ValueError: ``q`` outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q}: between 0 and 100")
    s = sorted(values)
    if not s:
        return math.nan
    h = (len(s) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])
