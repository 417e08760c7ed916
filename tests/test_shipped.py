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

H200_WHY = ("the one-byte split plan (decode_attention.plan: PER_SM_Q, 2026-12-07, its one-wave "
            "rule the same day) measured and shipped on the H100 only: the H200's files wait for "
            "a call on one")

STALE: dict = {  # (device file, kernel): why its shipped choices predate the code
    ("nvidia_h200", "decode_attention"): H200_WHY}


@pytest.mark.parametrize("path", sorted(tuning.SHIPPED_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_shipped_tile_choices_match_the_code(path):
    cal = SHIPPED_DIR / f"{path.stem}.json"
    triton_version = json.loads(cal.read_text())["triton"]  # the version they were made under
    secs = json.loads(path.read_text())["kernels"]
    stale = sorted(k for k, sec in secs.items() if k in tuning.SOURCES
                   and sec["fingerprint"] != tuning.fingerprint(triton_version,
                                                                modules=tuning.SOURCES[k]))
    assert stale == sorted(k for (dev, k) in STALE if dev == path.stem), stale


# (shipped calibration, family): why its entries predate the code (a GPU kind not lent since the
# change); priced from on another machine, the predictions say so (prediction_stale)
STALE_CALIBRATION: dict[tuple[str, str], str] = {  # (device slug, family): why it is stale
    ("nvidia_h200", "decode_attn/triton"): H200_WHY, ("nvidia_h200", "launch"): H200_WHY}


@pytest.mark.parametrize("path", sorted(SHIPPED_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_shipped_calibrations_match_the_code(path):
    """Each shipped calibration's families were measured under the tree's code (fingerprints
    recomputed with the calibration's own device, versions and host), or are listed in
    ``STALE_CALIBRATION`` with the reason."""
    from sweep.analysis.fingerprints import code_stale

    stale = code_stale(json.loads(path.read_text()))
    assert stale == sorted(f for (dev, f) in STALE_CALIBRATION if dev == path.stem), stale


def test_a_stale_shipped_calibration_says_so_in_every_prediction(monkeypatch):
    """Priced from a shipped calibration whose kernels changed after it was shipped (a family's
    fingerprint edited here), a design's row says ``prediction_stale`` and names the family and
    why in ``prediction_notes``, and the predicted table printed says so; from a current one,
    neither."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.pricing import Calibrated
    from sweep.analysis.targets import predict_on
    from zoo.config import ModelConfig

    spec = load_spec("h100_sxm")
    cfg = ModelConfig.from_name("llama3_2_1b").replace(kernels="triton")
    wl = {"batch": 8, "prompt_len": 512, "new_tokens": 64}
    real = store.shipped
    have = real("NVIDIA H100 80GB HBM3")
    assert store.shipped_for(spec).meta.get("stale") is None  # current (the test above)
    row = predict_on(cfg, wl, spec, Calibrated(store.shipped_for(spec)))
    assert row["prediction_stale"] is False and "stale" not in row["prediction_notes"]
    fps = dict(have.meta["fingerprints"], moe_gemm="0" * 12)
    monkeypatch.setattr(store, "shipped", lambda name: have.with_(
        meta=dict(have.meta, fingerprints=fps)))
    got = store.shipped_for(spec)
    assert got.meta["stale"] == ["moe_gemm"]
    row = predict_on(cfg, wl, spec, Calibrated(got))
    assert row["prediction_stale"] is True
    assert "stale calibration: moe_gemm" in row["prediction_notes"]
    assert "shipped before these kernels changed" in row["prediction_notes"]
    import pandas as pd

    from sweep.report.tables import predicted_summary

    shown = predicted_summary(pd.DataFrame([dict(row, state="COMPLETE")]))
    assert "1 of 1 priced from a stale calibration: moe_gemm" in shown
