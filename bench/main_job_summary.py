"""The main job's front as a table, with the checks its record must pass.

    python -m bench.main_job_summary results/gqa_vs_mha-*/trials.csv

Per design (``n_kv_heads``): decode tok/s, TPOT, decode MBU of the copy bandwidth measured in the
run, the bound the row names, TTFT and the calibrated prediction's error. Then two checks: decode
tok/s strictly decreasing from MQA to MHA (MQA reads the fewest bytes per step), and every
design's decode MBU at least ``MBU_MIN`` of the measured copy bandwidth. Exit 1 when a check
fails.
"""

from __future__ import annotations

import sys

import pandas as pd

MBU_MIN = 0.75


def main(path: str) -> int:
    df = pd.read_csv(path)
    df = df[df["state"] == "COMPLETE"].sort_values("n_kv_heads")
    cols = {"n_kv_heads": "n_kv_heads", "decode_tok_s": "decode tok/s",
            "decode_tpot_ms": "TPOT ms", "decode_mbu_vs_measured": "MBU (measured copy)",
            "decode_bound": "bound", "ttft_ms": "TTFT ms",
            "decode_pred_error_pct": "TPOT pred. error %", "prefill_pred_error_pct":
            "TTFT pred. error %"}
    keep = [c for c in cols if c in df]
    print("| " + " | ".join(cols[c] for c in keep) + " |")
    print("|" + " --- |" * len(keep))
    for r in df[keep].to_dict(orient="records"):
        print("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v)
                                for v in r.values()) + " |")
    rate = df["decode_tok_s"].tolist()
    falling = all(a > b for a, b in zip(rate, rate[1:]))
    low = df[df["decode_mbu_vs_measured"] < MBU_MIN]["n_kv_heads"].tolist()
    print(f"\n{len(df)} designs COMPLETE; decode tok/s strictly decreasing from MQA to MHA: "
          f"{falling}; decode MBU >= {MBU_MIN} on every design: {not low}"
          + (f" (below: n_kv_heads {low})" if low else ""))
    return 0 if falling and not low else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
