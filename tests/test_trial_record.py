"""The typed result record (``sweep.common.trial_record``): sections flattened to the results row in
one place, the row stored as one JSON attribute, and a measured study's rows holding every
section the pipeline fills."""

import json
import math

from sweep.common.trial_record import SECTIONS, TrialRecord, row_json


def test_columns_flatten_the_sections_in_order_a_later_one_winning():
    rec = TrialRecord(design={"n_heads": 32, "mode": "eager"}, workload={"batch": 8},
                      measured={"decode_tpot_ms": 1.5, "noisy": False},
                      status={"noisy": True, "trial_dir": "t/0001"})
    cols = rec.columns()
    assert list(cols) == ["n_heads", "mode", "batch", "decode_tpot_ms", "noisy", "trial_dir"]
    assert cols["noisy"] is True  # status stands after measured
    assert rec.overlaps() == {"noisy": ["measured", "status"]}
    assert TrialRecord().columns() == {} and TrialRecord().overlaps() == {}


def test_the_sections_are_the_dataclass_fields_in_row_order():
    from dataclasses import fields

    assert tuple(f.name for f in fields(TrialRecord)) == SECTIONS
    rec = TrialRecord(**{s: {s: i} for i, s in enumerate(SECTIONS)})
    assert list(rec.columns().values()) == list(range(len(SECTIONS)))


def test_the_stored_row_is_one_json_object_nan_as_null():
    row = {"a": 1.5, "b": math.nan, "c": math.inf, "d": [1, 2], "e": {"x": 1}, "f": "s"}
    back = json.loads(row_json(row))
    assert back == {"a": 1.5, "b": None, "c": "inf", "d": "[1, 2]", "e": '{"x": 1}', "f": "s"}


def test_a_measured_trials_row_holds_every_section_the_pipeline_fills(measured_study):
    """A COMPLETE trial of the shared tiny study (CPU): a column of each section the objective
    fills on a CPU (no profiler asked for) is in its stored row."""
    _, study, _ = measured_study
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert done
    row = json.loads(done[0].user_attrs["row"])
    for section, col in (("design", "n_kv_heads"), ("design", "switch_pdl"),
                         ("workload", "batch"), ("environment", "torch"),
                         ("measured", "decode_tpot_ms"), ("measured", "decode_tpot_ms_p90"),
                         ("measured", "decode_j_per_token_reason"),
                         ("derived", "decode_mbu_vs_measured"), ("predicted", "decode_pred_ms"),
                         ("status", "noisy"), ("status", "trial_dir")):
        assert col in row, (section, col)
