"""The held-out mechanism on the CPU: a validation set measured (trial children), priced by the
performance model, tabled per stage and category with the interval's coverage; a planted model
bug shows in it."""

import pytest

from kernels.switches import Switches
from sweep.analysis import validation as report
from sweep.analysis.hardware import load_spec
from sweep.analysis.pricing import Calibrated
from sweep.caches import calibration as cal
from sweep.cli import validate as V
from sweep.common.env import detect_device
from sweep.common.row import STAGES, TIME, error, pred

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("validate")
    s = V.load_set("heldout_cpu")
    dev = detect_device("cpu")
    chosen = V.items(s, "cpu")
    got = cal.ensure(dev, [(c, w, m) for _, c, w, m in chosen], Switches(),
                     cal_dir=tmp / "calibration", quick=True, log=lambda m: None)
    return (chosen, V.measure(chosen, dev, tmp, Switches(), tmp / "tuning"),
            Calibrated(got), tmp)


def test_the_frozen_sets_load_and_hold_what_they_promise():
    s = V.load_set("heldout")
    cats = {c for p in s["pairs"] for c in p["cat"]}
    assert len(s["pairs"]) >= 40 and {"depth", "head_dim", "kv_int8", "kv_fp8", "torch", "eager",
                                      "context", "qwen", "mistral", "odd_heads", "ffn"} <= cats
    assert "for checking only" in (V.CONF / "validation/heldout.yaml").read_text().lower()
    chosen = V.items(s, "cuda")
    assert {c.head_dim for _, c, _, _ in chosen} >= {64, 80, 96, 128, 256}
    assert min(c.n_layers for _, c, _, _ in chosen) <= 2 and max(
        c.n_layers for _, c, _, _ in chosen) >= 64
    assert {w["batch"] for _, _, w, _ in chosen} >= {1, 64}
    with pytest.raises(FileNotFoundError, match="known: development"):
        V.load_set("nope")


def test_validation_table_on_the_cpu_and_a_planted_bug(measured, monkeypatch):
    chosen, m, c, _ = measured
    df = V.price(chosen, m, c, load_spec("cpu"), {}, Switches())
    assert len(df) == 4 and df[TIME["decode"]].gt(0).all()
    for st in STAGES:
        assert df[pred(st, "lo")].le(df[pred(st, "calibrated")]).all()
        assert df[pred(st, "hi")].ge(df[pred(st, "calibrated")]).all()
        assert df[error(st)].notna().all()
    good = report.summary(df)
    assert set(good["categories"]) == {"real", "depth", "head_dim", "ffn"}
    assert good["all"]["decode"]["calibrated"]["n"] == 4
    assert "in_interval" in good["all"]["decode"]
    text = report.markdown(df, good, "heldout_cpu")
    assert "| decode | calibrated |" in text and "tiny_ffn" in text
    # a planted bug: every kernel and every launch priced three times its calibrated cost (a
    # GEMM alone may not show: an eager stage on a loaded CPU is host-bound, its time the
    # launches'). Every design's priced prefill triples and its signed error rises: the table
    # follows the model, whatever the CPU's own bias or load
    price, launch = Calibrated.price, Calibrated.launch

    def planted(factor):
        monkeypatch.setattr(Calibrated, "price", lambda self, k: (factor * price(self, k)[0],
                                                                  price(self, k)[1]))
        monkeypatch.setattr(Calibrated, "launch", lambda self, w: factor * launch(self, w))
        return V.price(chosen, m, c, load_spec("cpu"), {}, Switches())

    bad3 = planted(3)
    rise = bad3[pred("prefill", "calibrated")] / df[pred("prefill", "calibrated")]
    assert rise.gt(2).all(), rise.tolist()
    assert (bad3[error("prefill")] > df[error("prefill")]).all()
    # and a gate set a little above today's errors fails on a bug that dominates the price
    bad = report.summary(planted(10))
    g, b = good["all"]["prefill"]["calibrated"], bad["all"]["prefill"]["calibrated"]
    assert b["median"] > g["median"] + 30, (g, b)
    lenient = {"prefill": (g["median"] + 15, g["p90"] + 25)}

    def errors_pass(s):  # the error gates (a CPU's interval coverage depends on its load)
        return all(v for k, v in report.passes(s, lenient).items() if "median" in k or "p90" in k)

    assert errors_pass(good) and not errors_pass(bad)


def test_validate_command_end_to_end(measured):
    """``python -m sweep.cli.validate`` on one pair writes its table, summary and Markdown (the
    calibration the fixture made: its entries are there, none measured again)."""
    import json

    root = measured[3]
    rc = V.main(["--set", "heldout_cpu", "--only", "tiny_b2", "--device", "cpu", "--targets",
                 "none", "--results-dir", str(root)])
    assert rc == 0
    out = root / "validate" / "heldout_cpu-cpu"
    s = json.loads((out / "summary.json").read_text())
    assert s["set"] == "heldout_cpu" and s["summary"]["rows"] == 1
    assert (out / "heldout_cpu.csv").exists() and (out / "heldout_cpu.md").exists()


def test_a_gpu_set_on_the_cpu_is_refused_before_any_work(tmp_path):
    """``--set heldout`` on the CPU named its real-size designs and the CPU set, instead of
    measuring 44 of them (8B models among them) for hours."""
    import pytest

    with pytest.raises(ValueError, match=r"real-size designs \(.*llama3_1_8b.*--set heldout_cpu"):
        V.main(["--set", "heldout", "--device", "cpu", "--results-dir", str(tmp_path)])
    assert not (tmp_path / "validate").exists()


def test_a_bad_set_or_measured_file_is_refused_before_any_work(tmp_path):
    """A pair with batch 0 was calibrated and "measured" before ``math domain error``; a
    --measured file naming no pair of the set wrote an empty table over the last run's; YAML
    errors were tracebacks."""
    good = (V.CONF / "validation" / "heldout_cpu.yaml").read_text()
    bad = tmp_path / "zero.yaml"
    bad.write_text(good.replace("batch: 1", "batch: 0", 1))
    with pytest.raises(ValueError, match=r"batch=0 must be a whole number >= 1"):
        V.load_set(str(bad))
    for text, said in (("pairs: [", "not YAML"), ("", "not a validation set"),
                       ("pairs: []", "not a validation set")):
        bad.write_text(text)
        with pytest.raises(ValueError, match=said):
            V.load_set(str(bad))
    other = tmp_path / "other.jsonl"
    other.write_text('{"name": "no_such_pair", "measured": {}}\n')
    with pytest.raises(ValueError, match="measures no pair of the set"):
        V.main(["--set", "heldout_cpu", "--device", "cpu", "--measured", str(other),
                "--results-dir", str(tmp_path)])
    other.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1 is not a measured pair"):
        V.main(["--set", "heldout_cpu", "--device", "cpu", "--measured", str(other),
                "--results-dir", str(tmp_path)])
    assert not (tmp_path / "validate").exists() and not (tmp_path / "ceilings").exists()
