"""The tile choices shipped with the package are valid for the kernels as they stand.

A choice is applied only under the fingerprint of the code it was made with (``kernels.tuning``):
an edit of a kernel's code without its choices measured again and shipped makes every fresh
machine tune that kernel again (tens of seconds on the main job's first design) and its
calibration family stale. This test names each shipped section that no longer matches; a GPU kind
whose section is knowingly stale is listed in ``STALE`` with the reason.
"""

import json

import pytest

from kernels import tuning
from sweep.analysis.calibration_store import SHIPPED_DIR

STALE: dict = {}  # (device file, kernel): why its shipped choices predate the code


@pytest.mark.parametrize("path", sorted(tuning.SHIPPED_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_shipped_tile_choices_match_the_code(path):
    cal = SHIPPED_DIR / f"{path.stem}.json"
    triton_version = json.loads(cal.read_text())["triton"]  # the version they were made under
    secs = json.loads(path.read_text())["kernels"]
    stale = sorted(k for k, sec in secs.items() if k in tuning.SOURCES
                   and sec["fingerprint"] != tuning.fingerprint(triton_version,
                                                                modules=tuning.SOURCES[k]))
    assert stale == sorted(k for (dev, k) in STALE if dev == path.stem), stale
