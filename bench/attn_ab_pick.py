"""Which side of a decode-attention A/B to ship: ``bench.attn_ab_probe``'s ``kernels_<side>_<round>.csv``
(``bench/reference/run_attn_ab.sh``: ``base``, ``new``, ``both``) read back, each shape's best
fixed tile per side (the median of its rounds), and a side chosen when it is faster where it was
built to be and no slower elsewhere.

    python -m bench.attn_ab_pick OUT_DIR   # the medians per shape and tile, the verdict as JSON,
                                           # then the side's name alone

A side qualifies when its geometric-mean gain over the one-byte shapes is at least ``min_gain``,
no 16-bit shape is slower by more than ``max_loss``, and its largest error against the reference
is within twice the base's (or 0.01); of those, the largest gain wins, else ``base`` (ship
nothing).
"""

from __future__ import annotations

import glob
import json
import math
import sys

import pandas as pd

ONE_BYTE = ("b64_8k_int8", "b64_8k_fp8", "flagship_g4_int8")
SIXTEEN = ("b64_8k_bf16", "flagship_g32")


def _sided(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(side=df["tag"].str.rsplit("_", n=1).str[0])


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Median ``us`` per (shape, tile) and side over the rounds, and each side's change against
    ``base`` in percent (``<side>_pct``)."""
    t = _sided(df).groupby(["shape", "tile", "side"])["us"].median().unstack("side")
    for c in t.columns.drop("base"):
        t[f"{c}_pct"] = (t[c] / t["base"] - 1) * 100
    return t


def pick(df: pd.DataFrame, min_gain: float = 0.02, max_loss: float = 0.02) -> tuple[str, dict]:
    """``(side, verdict)`` from the probe's rows (columns ``tag`` = ``<side>_<round>``,
    ``shape``, ``tile``, ``us``, ``max_abs_err``); ``verdict[side]``: ``gain`` (fraction),
    ``loss_16`` (fraction), ``err``, ``ok``.

    Raises:
        ValueError: no ``base`` rows, or a side without every shape the base has.
    """
    df = _sided(df)
    if "base" not in set(df["side"]):
        raise ValueError("no base rows: the tree's own kernel was not timed")
    best = df.groupby(["side", "shape", "tile"])["us"].median().groupby(["side", "shape"]).min()
    err = df.groupby("side")["max_abs_err"].max()
    base = best["base"]
    verdict, chosen, top = {}, "base", min_gain
    for side in sorted(set(df["side"]) - {"base"}):
        b = best[side]
        if set(base.index) - set(b.index):
            raise ValueError(f"side {side!r} lacks shapes {sorted(set(base.index) - set(b.index))}")
        one = [base[s] / b[s] for s in ONE_BYTE if s in base.index]
        gain = math.exp(sum(map(math.log, one)) / len(one)) - 1 if one else 0.0
        loss = max((b[s] / base[s] - 1 for s in SIXTEEN if s in base.index), default=0.0)
        ok = gain >= min_gain and loss <= max_loss and err[side] <= max(2 * err["base"], 0.01)
        verdict[side] = dict(gain=round(gain, 4), loss_16=round(loss, 4),
                             err=float(err[side]), ok=bool(ok))
        if ok and gain >= top:
            chosen, top = side, gain
    return chosen, verdict


def main(out: str) -> int:
    df = pd.concat([pd.read_csv(f) for f in sorted(glob.glob(f"{out}/kernels_*.csv"))])
    side, verdict = pick(df)
    print(table(df).round(2).to_string())
    print("max err", _sided(df).groupby("side")["max_abs_err"].max().to_dict())
    print(json.dumps(verdict, indent=1))
    print(side)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
