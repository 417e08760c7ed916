"""The held-out table of a GPU from its halves priced apart (``reprice_heldout.py`` per half, each
with the fixed costs its own host measured): the rows together, the summary, the checks and the
generated table with categories (``sweep.analysis.validation``).

    python bench/reference/combine_heldout.py OUT_PREFIX "TITLE" HALF1/heldout.csv HALF2/heldout.csv

Writes ``OUT_PREFIX.csv``, ``OUT_PREFIX.json`` and ``OUT_PREFIX_priced.md``.
"""

import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from sweep.analysis import validation as V  # noqa: E402


def main() -> int:
    out, title = sys.argv[1], sys.argv[2]
    df = pd.concat([pd.read_csv(p) for p in sys.argv[3:]], ignore_index=True)
    df["cat"] = [ast.literal_eval(x) if isinstance(x, str) and x.startswith("[") else x
                 for x in df["cat"]]
    s = V.summary(df)
    df.to_csv(out + ".csv", index=False)
    Path(out + ".json").write_text(json.dumps({"summary": s, "checks": V.passes(s)}, indent=1,
                                              default=str))
    Path(out + "_priced.md").write_text(V.markdown(df, s, title))
    for k in ("decode", "prefill"):
        c, r = s["all"][k]["calibrated"], s["all"][k]["roofline"]
        print(k, c["n"], f"{c['median']:.1f} / {c['p90']:.1f} / {c['max']:.1f}",
              f"roofline {r['median']:.1f} / {r['p90']:.1f}",
              f"in {100 * s['all'][k]['in_interval']:.0f}% narrow {100 * s['all'][k]['narrow']:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
