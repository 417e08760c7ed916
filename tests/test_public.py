"""The public-measurements dataset (issue 25): it loads and validates (units, required fields,
a source on every row), bad rows are refused by field, the leave-one-chip-out check never uses
a chip's own rows and runs on the CPU in under 30 s, and the fitted specs price a design."""

import csv
import math
import shutil
import time

import numpy as np
import pytest

from sweep.analysis import public as P
from sweep.analysis import public_loo as L
from sweep.analysis.hardware import HW_DIR as REAL_HW_DIR
from sweep.analysis.hardware import load_spec
from sweep.analysis.targets import predict_on
from sweep.report import public_check as C
from zoo import ModelConfig


def test_the_dataset_loads_with_what_the_issue_asks():
    rows, chips, models = P.load()
    assert len(rows) >= 60
    assert len({r.group for r in rows}) >= 10
    assert {"apple", "amd", "qualcomm", "nvidia", "intel"} <= {r.raw["vendor"] for r in rows}
    assert all(r.source.startswith("https://") and r.raw["source_date"] for r in rows)
    assert {P.FIGURES[r.figure] for r in rows} == {"tokens/s", "ms"}
    for c in chips.values():  # every datasheet figure given has its source
        if c["memory_bandwidth_gb_s"]:
            assert len(c["bandwidth_source"]) > 10, c["chip"]


@pytest.mark.parametrize("field,value,match", [
    ("source", "", "no source"),
    ("unit", "ms", "expected 'tokens/s'"),
    ("chip", "Apple M9", "not in chips.csv"),
    ("bits_per_weight", "four", "bits_per_weight='four' is not a number"),
])
def test_a_bad_row_is_refused_naming_its_field(tmp_path, field, value, match):
    for f in ("chips.csv", "models.yaml"):
        shutil.copy(P.DATA / f, tmp_path / f)
    rows = list(csv.DictReader(open(P.DATA / "measurements.csv")))
    i = next(k for k, r in enumerate(rows) if r["figure"] == "decode_tok_s")
    rows[i][field] = value
    with open(tmp_path / "measurements.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(ValueError, match=match) as e:
        P.load(tmp_path)
    assert f"line {i + 2}" in str(e.value)


def test_leave_one_chip_out_never_sees_the_chip_and_runs_fast():
    t0 = time.perf_counter()
    df, s = C.run_check()
    assert time.perf_counter() - t0 < 30
    assert s["decode"]["loo"]["n"] >= 40 and math.isfinite(s["decode"]["loo"]["median"])
    # every kind is judged on the same published figures; the datasheet roofline is worse
    assert s["decode"]["roofline"]["median"] > s["decode"]["loo"]["median"]
    # a chip's own figures changed tenfold leave its leave-one-out prediction unchanged
    rows, chips, models = P.load()
    chip = "NVIDIA GeForce RTX 3090"
    before = [t for t in L.check(rows, chips, models) if t["chip"] == chip]
    for r in rows:
        if r.chip == chip:
            r.value *= 10
    after = [t for t in L.check(rows, chips, models) if t["chip"] == chip]
    assert [t["pred_loo_s"] for t in before] == pytest.approx([t["pred_loo_s"] for t in after])
    assert [t["published_s"] for t in before] != pytest.approx([t["published_s"] for t in after])
    # each priced point has an interval re-centred on it; they hold >= 80% of the decode figures
    priced = df[df.pred_loo_s.notna() & df.loo_half_width_pct.notna()]
    assert (priced.pred_loo_lo_s < priced.pred_loo_s).all()
    assert (priced.pred_loo_s < priced.pred_loo_hi_s).all()
    assert priced.pred_loo_s.to_numpy() == pytest.approx(
        (priced.pred_loo_lo_s * priced.pred_loo_hi_s).to_numpy() ** 0.5)
    iv = s["decode"]["interval"]
    assert iv["n"] >= 100 and iv["coverage"] >= 0.8 and 0 < iv["median_half_width_pct"] < 100


def test_an_interval_never_sees_its_chip():
    """A chip's interval is drawn from fits that left it out (and left out the chip they
    priced): its own figures changed tenfold leave its point and interval as they were, while
    another chip's interval moves. On the rows of six chips of one family, to stay fast."""
    rows, chips, models = P.load()
    fam = max({r.family for r in rows}, key=lambda f: len({r.group for r in rows
                                                         if r.family == f}))
    groups = sorted({r.group for r in rows if r.family == fam})[:6]
    rows = [r for r in rows if r.group in groups]
    chip = groups[0]

    def intervals():
        return {(t["chip"], t["model"], t["figure"], t["batch"], t["value"]): (
            t["pred_loo_s"], t["pred_loo_lo_s"], t["pred_loo_hi_s"])
            for t in L.check(rows, chips, models, intervals=True)}

    before = intervals()
    for r in rows:
        if r.group == chip:
            r.value *= 10
    after = intervals()
    own = [k for k in before if any(r.chip == k[0] and r.group == chip for r in rows)]
    assert own
    for k in own:  # its value is the key: the row is found again by its other fields
        k2 = next(a for a in after if a[:4] == k[:4] and a[0] == k[0])
        assert after[k2] == pytest.approx(before[k], nan_ok=True)
    others = [k for k in before if k not in own and math.isfinite(before[k][1])]
    assert any(after[k] != pytest.approx(before[k]) for k in others)


def test_fitted_specs_price_a_design_with_their_basis_and_band(tmp_path, monkeypatch):
    spec = load_spec("m4_max")
    assert spec.fitted["decode"]["rows"] >= 10 and "fitted on" in spec.fitted["basis"]
    assert "superseded" in spec.assumptions["basis"]
    cfg = ModelConfig.from_name("llama3_2_1b", kernels="torch", dtype="fp16", kv_dtype="fp16")
    p = predict_on(cfg, {"batch": 1, "prompt_len": 512, "new_tokens": 64}, spec)
    assert p["basis_kind"] == "fitted" and p["decode_pred_ms_lo"] < p["decode_pred_ms_hi"]
    assert 0 < p["decode_tpot_ms"] < 100
    # writing the fit again changes nothing (one block, one marker)
    for f in C.HW_DIR.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setattr(C, "HW_DIR", tmp_path)
    blocks = C.fitted_blocks()
    C.write_fitted(blocks)
    once = (tmp_path / "m4_max.yaml").read_text()
    C.write_fitted(blocks)
    assert (tmp_path / "m4_max.yaml").read_text() == once and once.count(C.MARK) == 1
    # and the shipped specs hold the fit of today's dataset
    assert once == (REAL_HW_DIR / "m4_max.yaml").read_text()


def test_each_fit_is_shrunk_toward_its_parent():
    assert P.parents_of("apple-gpu/llama.cpp-metal", "llama.cpp-metal") == {
        "apple-gpu/llama.cpp-metal": "apple-gpu", "apple-gpu": "*-gpu", "llama.cpp-metal": "*",
        "*-gpu": "*", "*": None}
    rows, chips, models = P.load()
    prepared = [(r, *P.terms(r, chips[r.chip], models[r.model])) for r in rows]
    fits = P._fit_on(prepared, lambda o: True)
    own = [(r, f, obs) for r, f, obs, _ in prepared if r.family == "apple-gpu/llama.cpp-metal"
           and P._stage(r) == "decode" and math.isfinite(f[1])]
    F = np.array([f for _, f, _ in own])
    raw = P.fit(F, np.array([obs for _, _, obs in own]), [r.group for r, _, _ in own])
    shrunk, n, nc = fits[("apple-gpu/llama.cpp-metal", "decode")]
    parent = fits[("apple-gpu", "decode")][0]
    assert n == len(own) and nc == len({r.group for r, _, _ in own})  # its own rows counted

    def gap(c):  # how far a fit's step times at the family's rows lie from the parent's (log^2)
        return float(np.sum(np.log(F @ c / (F @ parent)) ** 2))

    assert 0 < gap(shrunk) < gap(raw)


def test_an_empty_dataset_is_refused_by_name(tmp_path):
    # whatif --check-public --data D with an empty measurements.csv: a KeyError traceback
    for f in ("chips.csv", "models.yaml"):
        shutil.copy(P.DATA / f, tmp_path / f)
    header = (P.DATA / "measurements.csv").read_text().splitlines()[0]
    (tmp_path / "measurements.csv").write_text(header + "\n")
    with pytest.raises(ValueError, match="measurements.csv: no measurement rows"):
        P.load(tmp_path)
