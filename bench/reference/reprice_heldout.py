"""Price a validation set's measured pairs again, offline (no GPU): this checkout's performance
model on the figures a GPU run measured (its ``measured.jsonl``), from a calibration and the
measured ceilings of the GPU they were measured on (another device's calibration is transferred
by those ceilings, as ``python -m sweep.cli.validate --calibration`` does).

    TRITON_INTERPRET=1 python bench/reference/reprice_heldout.py --set heldout \
        --measured A.jsonl [B.jsonl ...] --calibration CAL.json --ceilings CEIL.json \
        --hardware h100_sxm --out DIR [--anchors RUN/anchors.json] [--host-calibration RUN/calibration.json]

Writes ``DIR/<set>.csv``, ``<set>.md`` and ``summary.json`` (``sweep.analysis.validation``).
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.switches import Switches  # noqa: E402
from sweep.analysis import anchors, pricing  # noqa: E402
from sweep.analysis import calibration_store as store  # noqa: E402
from sweep.analysis import validation as V  # noqa: E402
from sweep.analysis.hardware import load_spec  # noqa: E402
from sweep.cli.validate import items, load_set, price, read_measured  # noqa: E402
from sweep.common.atomic import write_json, write_text  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="heldout")
    ap.add_argument("--measured", nargs="+", required=True)
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--ceilings", required=True, help="the measuring GPU's ceilings .json")
    ap.add_argument("--hardware", required=True, help="its spec (conf/hardware)")
    ap.add_argument("--anchors", help="the transfer's anchors the GPU run timed (its anchors.json)")
    ap.add_argument("--host-calibration", help="the calibration the GPU run priced with (its "
                    "calibration.json: the fixed costs measured on that host)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    s = load_set(a.set)
    ceilings = json.loads(Path(a.ceilings).read_text())
    device = ceilings.get("env", {}).get("device") or a.hardware
    given = store.load("", where=Path(a.calibration))
    meta, table = given.meta, given.table
    if a.host_calibration:  # that host's fixed costs, the GPU entries of --calibration
        host = store.load("", where=Path(a.host_calibration)).table
        table = pd.concat([table[table.family != "launch"], host[host.family == "launch"]],
                          ignore_index=True)
    c = pricing.Calibrated(given.with_(table=table))
    if meta.get("device") != device:
        c = anchors.transfer(c, meta["ceilings"], dict(ceilings, device=device), "bf16",
                             anchors=json.loads(Path(a.anchors).read_text()) if a.anchors else None)
    chosen, measured = [], []
    for path in a.measured:
        ch, me = read_measured(Path(path), items(s, "cuda"))
        chosen += ch
        measured += me
    df = price(chosen, measured, c, load_spec(a.hardware), ceilings, Switches())
    summ = V.summary(df)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"{s['name']}.csv", index=False)
    write_json(out / "summary.json", {"set": s["name"], "device": device,
                                      "calibration": meta.get("device"),
                                      "transferred": bool(c.meta.get("transferred_to")),
                                      "summary": summ, "checks": V.passes(summ)})
    write_text(out / f"{s['name']}.md", V.markdown(
        df, summ, f"{s['name']} on {device} (calibration: {meta.get('device')}"
        + (", transferred" if c.meta.get("transferred_to") else "") + "; priced offline)"))
    print(json.dumps(summ["all"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
