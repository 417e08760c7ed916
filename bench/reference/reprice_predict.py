"""Re-price the rows of the H100 performance-model record (``predict_h100/rows_{b1,b8}.csv``)
with this checkout's performance model and the committed H100 calibration (v7), offline, no GPU.

Each row's design is rebuilt from its study (the shipped experiment of that name) and its design
label; its workload is the record's (b1: ``workload=default workload.new_tokens=64``, b8:
``workload=long_context``). Prints the signed error of each prediction against the row's
measurement and the error summaries; ``--out F.json`` writes them. Run it in two checkouts to see
what a change to the model does to the record's rows.

Usage: ``TRITON_INTERPRET=1 python bench/reference/reprice_predict.py [--out F.json]``
(``TRITON_INTERPRET`` lets the CPU build the Triton designs' plans; nothing is launched). Each
row is priced with its own kernels (``kernels`` column): a plan built on a machine without a GPU
takes the torch ones, which earlier runs of this script priced the Triton rows by.

With ``--v3`` it re-prices the third H100 record's rows (``predict_h100_v3/rows_{b1,b8}.csv``)
from the H100 calibration shipped in this checkout. With ``--h200 RUN_DIR`` it re-prices the H200
record's rows instead
(``predict_h200_from_h100_v3/rows_h200.csv``, batch 1) from the H100 calibration shipped in
this checkout, transferred to the H200 as a study there does it today: by the anchors, with the
fixed costs measured on the host (``RUN_DIR``: a held-out call's ``anchors.json``,
``calibration.json`` / ``.parquet`` (its host's launch family) and ``ceilings.json``, all
measured on an H200).
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hydra import compose, initialize_config_dir  # noqa: E402

from sweep.analysis import calibration_store as store  # noqa: E402
from sweep.analysis.hardware import load_spec  # noqa: E402
from sweep.analysis.predict import row_predictions  # noqa: E402
from sweep.analysis.pricing import Calibrated  # noqa: E402
from sweep.config.schema import register  # noqa: E402
from sweep.plan import plan_from_config  # noqa: E402

REF = ROOT / "results/reference"
WORKLOADS = {"b1": ["workload=default", "workload.new_tokens=64"], "b8": ["workload=long_context"]}


def plan(exp: str, w: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"+experiment={exp}", *WORKLOADS[w],
                                                       "quiet=true", "cpu.enabled=false"])
    return plan_from_config(cfg)


def design(p, label: str):
    """The design of a row's label (``n_kv_heads=2``, ``heads=hd64``, ``kernels=torch, mode=eager``)."""
    over = {}
    for part in label.split(", "):
        k, v = part.split("=")
        choices = p.space.get(k, {}).get("choices")
        if isinstance(choices, dict):
            over.update(choices[v])
        elif k != "mode":
            over[k] = int(v) if v.isdigit() else v
    return p.base.replace(**over)


def _h200(run: Path):
    """The shipped H100 calibration with the H200 host's fixed costs of ``run``, transferred by
    its anchors: ``(Calibrated, spec, ceilings, [(set, rows csv)])``."""
    from sweep.analysis.anchors import transfer

    h100 = store.load("", where=ROOT / "sweep/analysis/calibrations/nvidia_h100_80gb_hbm3.json")
    host = store.load("", where=run / "calibration.json")
    if host is None or "family" not in host.table:
        raise SystemExit(f"{run}/calibration.json (+ .parquet): no host calibration with families")
    host, table = host.table, h100.table
    table = pd.concat([table[table.family != "launch"], host[host.family == "launch"]],
                      ignore_index=True)
    ceilings = json.loads((run / "ceilings.json").read_text())
    c = transfer(Calibrated(h100.with_(table=table)), h100.meta["ceilings"],
                 dict(ceilings, device="NVIDIA H200"),
                 "bf16", anchors=json.loads((run / "anchors.json").read_text()))
    return c, load_spec("h200"), ceilings, [("b1", REF / "predict_h200_from_h100_v3/rows_h200.csv")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--v3", action="store_true", help="the third H100 record's rows, priced "
                     "from the calibration shipped in this checkout")
    how.add_argument("--h200", metavar="RUN_DIR", type=Path, help="the H200 record's rows, "
                     "transferred by this run's anchors and host costs")
    ap.add_argument("--out", type=Path, help="write the rows and summaries here (.json)")
    a = ap.parse_args()
    register()
    if a.h200:
        c, spec, ceilings, sets = _h200(a.h200)
    else:  # --v3: the third record's rows, priced from the calibration shipped in this checkout
        v3 = a.v3
        where = ROOT / "sweep/analysis/calibrations/nvidia_h100_80gb_hbm3.json" if v3 else \
            REF / "calibration_h100.json"
        have = store.load("", where=where)
        c, spec, ceilings = Calibrated(have), load_spec("h100_sxm"), have.meta["ceilings"]
        sets = [(w, REF / f"predict_h100{'_v3' if v3 else ''}/rows_{w}.csv") for w in WORKLOADS]
    plans, out = {}, {"rows": []}
    for w, rows in sets:
        for _, r in pd.read_csv(rows).iterrows():
            exp = r.study.rsplit("-", 1)[0]
            p = plans.setdefault((exp, w), plan(exp, w))
            # the row's kernels: a plan built on a machine without a GPU takes the torch ones
            pr = row_predictions(design(p, r.design).replace(kernels=r.kernels),
                                 dict(p.workload), spec, c, r["mode"],
                                 ceilings)
            out["rows"].append({
                "set": w, "study": r.study, "design": r.design, "kernels": r.kernels,
                "decode_tpot_ms": r.decode_tpot_ms, "ttft_ms": r.ttft_ms,
                "decode_pred_ms": pr["decode_pred_ms_calibrated"],
                "prefill_pred_ms": pr["prefill_pred_ms_calibrated"]})
    d = pd.DataFrame(out["rows"])
    d["decode_err_pct"] = 100 * (d.decode_pred_ms - d.decode_tpot_ms) / d.decode_tpot_ms
    d["prefill_err_pct"] = 100 * (d.prefill_pred_ms - d.ttft_ms) / d.ttft_ms
    out["rows"] = d.to_dict("records")
    out["summary"] = {}
    for name, sel in (("all", d), ("kernels=torch", d[d.kernels == "torch"])):
        for st in ("decode", "prefill"):
            e = sel[f"{st}_err_pct"].abs().dropna()
            out["summary"][f"{name} {st}"] = {"median_abs_pct": e.median(),
                                              "p90_abs_pct": e.quantile(0.9), "n": len(e)}
    print(d.round(3).to_string())
    print(json.dumps(out["summary"], indent=1))
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
