"""What-if targets checked against the world's measurements: the public dataset priced
leave-one-chip-out, side by side with today's stated efficiencies and a datasheet roofline, and
the fitted efficiencies written into the hardware specs.

``python -m sweep.cli.whatif --check-public [--out DIR]`` writes ``whatif_public.csv`` (every
dataset row: published and predicted step time, signed error per kind, the fit it came from),
``whatif_public.md`` (the summary and the table) and ``summary.json``.
``python -m sweep.cli.whatif --fit-public`` writes each non-NVIDIA spec's ``fitted`` block
(``conf/hardware/<spec>.yaml``) from the fit of its family on every row (``sweep.analysis.public``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import pandas as pd
import yaml

from ..analysis import public as P
from ..analysis import public_loo as L
from ..analysis.hardware import HW_DIR, available, load_spec
from ..analysis.validation import abs_stats
from ..common.atomic import write_atomic, write_text
from ..common.env import REPO, WORK
from .labels import sig4

KIND_WORDS = {"loo": "fitted, leave-one-chip-out", "newest": "fitted on older generations",
              "roofline": "datasheet roofline", "assumed": "today's stated efficiencies"}


def summary(table: list[dict]) -> dict:
    """``{stage: {kind: {n, median, p90, max}}}`` of the absolute errors (%) of ``check``'s
    rows, each kind over the rows it priced, and ``paired``: the same over the rows every kind
    priced."""
    out: dict = {}
    for st in ("decode", "prefill"):
        rows = pd.DataFrame([t for t in table if t["stage"] == st],
                            columns=[f"err_{k}_pct" for k in L.KINDS], dtype=float)
        both = rows.dropna()
        out[st] = {k: abs_stats(rows[f"err_{k}_pct"]) for k in L.KINDS}
        out[st]["paired"] = {k: abs_stats(both[f"err_{k}_pct"]) for k in L.KINDS}
        ivl = [t for t in table if t["stage"] == st and t.get("covered_loo") is not None]
        widths = sorted(t["loo_half_width_pct"] for t in ivl)
        at_claim = [t["covered_loo_at_claim"] for t in ivl if t["covered_loo_at_claim"] is not None]
        out[st]["interval"] = {  # leave-one-chip-out: neither point nor interval saw the chip
            "level": L.COVERAGE, "quantile": L.QUANTILE, "n": len(ivl),
            "coverage": sum(t["covered_loo"] for t in ivl) / len(ivl) if ivl else None,
            "median_half_width_pct": float(pd.Series(widths).median()) if widths else None,
            "coverage_at_quantile_equal_to_level": sum(at_claim) / len(at_claim) if at_claim
            else None}
    return out


def run_check(data: Path | None = None) -> tuple[pd.DataFrame, dict]:
    """``(table, summary)`` of the dataset (``sweep.analysis.public_loo.check``, ``summary``),
    with ``same_engine``: the summary over the rows priced by a fit of their own engine."""
    rows, chips, models = P.load(data)
    specs = {c: load_spec(d["spec"]) for c, d in chips.items() if d.get("spec")}
    table = L.check(rows, chips, models, specs, intervals=True)
    s = summary(table)
    s["same_engine"] = summary([t for t in table if t["fit_loo"] in (t["family"], t["engine"])])
    s["newest_of_line"] = summary([t for t in table if t["newest_of_line"]])
    s["dataset"] = {"rows": len(rows), "chips": len({r.group for r in rows}),
                    "vendors": sorted({r.raw["vendor"] for r in rows}),
                    "not_priced": sum(1 for t in table if not math.isfinite(t["pred_loo_s"]))}
    return pd.DataFrame(table), s


def _f(v, d=1):
    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{d}f}"


def markdown(df: pd.DataFrame, s: dict) -> str:
    """The summary (per stage and kind: median, p90, max abs. error, rows) and every row."""
    ds = s["dataset"]
    lines = ["# What-if targets against public measurements", "",
             f"{ds['rows']} published figures, {ds['chips']} chips, vendors "
             f"{', '.join(ds['vendors'])} (`conf/public/`); {ds['not_priced']} rows not priced "
             "(their reason in the table). Error = predicted / published rate - 1 (positive: "
             "predicted faster).", "",
             "| stage | rows | prediction | n | median abs. error | p90 | max |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for scope, sub in (("all priced", s), ("own engine fitted", s["same_engine"]),
                       ("newest generation of a line", s["newest_of_line"]),
                       ("priced by every kind", {st: s[st]["paired"] for st in ("decode",
                                                                                 "prefill")})):
        for st in ("decode", "prefill"):
            for k in L.KINDS:
                v = sub[st][k]
                lines.append(f"| {st} | {scope} | {KIND_WORDS[k]} | {v['n']} | "
                             f"{_f(v.get('median'))}% | {_f(v.get('p90'))}% | "
                             f"{_f(v.get('max'))}% |")
    cols = ["chip", "engine", "model", "weight_format", "batch", "figure", "value", "err_loo_pct",
            "err_newest_pct", "err_roofline_pct", "err_assumed_pct", "basis_loo"]
    t = df[cols].copy()
    for c in cols[7:11]:
        t[c] = t[c].map(lambda v: _f(v, 1))
    lines += ["", "## Every row", "", "| " + " | ".join(cols) + " |",
              "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(str(v).replace("|", "/") for v in r) + " |"
              for r in t.itertuples(index=False)]
    return "\n".join(lines) + "\n"


MARK = "# written by python -m sweep.cli.whatif --fit-public"


def spec_families(chips: dict, rows: list) -> dict:
    """``{spec: family key}`` for every non-NVIDIA spec: the family with the most rows of the
    spec's own chip (chips.csv ``spec``), else the commonest family of its vendor and kind, else
    the kind's (``*-cpu``)."""
    out = {}
    for name in available():
        spec = load_spec(name)
        if spec.vendor == "NVIDIA" or name == "cpu":
            continue
        own = [r.family for r in rows if chips[r.chip].get("spec") == name]
        vk = f"{spec.vendor.lower()}-{spec.kind}"
        same = [r.family for r in rows if r.family.startswith(vk + "/")]
        pick = own or same
        out[name] = max(set(pick), key=pick.count) if pick else f"*-{spec.kind}"
    return out


def fitted_blocks(data: Path | None = None) -> dict:
    """``{spec: fitted block}``: per stage the fit of the spec's family (``spec_families``; its
    vendor and kind's, then its kind's where the family has fewer than 3 rows of 2 chips), the
    rows, chips and sources it rests on and its leave-one-chip-out error band."""
    rows, chips, models = P.load(data)
    table = L.check(rows, chips, models)
    fits = L.family_fits(rows, chips, models, table)
    out = {}
    for name, fam in spec_families(chips, rows).items():
        block = {}
        for st in ("decode", "prefill"):
            for key in (fam, fam.split("/")[0], "*-" + fam.split("/")[0].split("-")[-1]):
                f = fits.get((key, st))
                if f and f["rows"] >= 3 and len(f["chips"]) >= 2:
                    block[st] = {"family": key, **{k: sig4(f[k]) for k in (
                        "per_layer_s", "fraction", "dequant_bytes_per_weight", "rows",
                        "loo_error_pct", "loo_half_width_pct")}, "chips": f["chips"]}
                    block.setdefault("sources", set()).update(f["sources"])
                    break
        if "decode" in block:
            block["sources"] = sorted(block.get("sources", []))
            block["basis"] = (f"fitted on {block['decode']['rows']} public decode measurements of "
                              f"{len(block['decode']['chips'])} chips ({block['decode']['family']})"
                              + (f" and {block['prefill']['rows']} prefill measurements "
                                 f"({block['prefill']['family']})" if "prefill" in block else "")
                              + "; conf/public/, python -m sweep.cli.whatif --fit-public")
            out[name] = block
    return out


def write_fitted(blocks: dict) -> list[str]:
    """Replace (or add) the ``fitted:`` block of each spec's YAML, leaving the rest of the file
    as written; the spec's ``assumptions.basis`` says the fit supersedes them. Returns the
    files written."""
    done = []
    for name, block in blocks.items():
        path = HW_DIR / f"{name}.yaml"
        text = path.read_text()
        text = text.replace("\n" + MARK, "")
        text = re.sub(r"\nfitted:\n(?:[ \-#].*\n?)*", "\n", text).rstrip("\n") + "\n"
        text = re.sub(r'(\n  basis: ")(?!superseded)', r"\1superseded by `fitted` (public "
                      r"measurements) where no calibration applies; stated before: ", text)
        dump = yaml.safe_dump({"fitted": json.loads(json.dumps(block))}, sort_keys=False,
                              width=100, default_flow_style=None)
        write_text(path, text + MARK + "\n" + dump)
        done.append(str(path.relative_to(REPO) if path.is_relative_to(REPO) else path))
    return done


def main(argv: list[str] | None = None) -> int:
    """The command line of ``sweep.cli.whatif --check-public | --fit-public``; 0 when written.

    Raises:
        FileNotFoundError: ``--data`` has no ``measurements.csv``. ValueError: a dataset row
            that fails its checks (file, line and field named).
    """
    ap = argparse.ArgumentParser(description="What-if targets against public measurements: "
                                             "the dataset priced leave-one-chip-out, or the "
                                             "specs' fitted efficiencies written")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check-public", action="store_true", help="price the dataset, write tables")
    g.add_argument("--fit-public", action="store_true", help="write the shipped specs' fitted "
                   "blocks (conf/hardware/*.yaml: the package's files, a maintainer's step)")
    ap.add_argument("--data", help="dataset folder (default conf/public)")
    ap.add_argument("--out", help="--check-public's output folder (default "
                    "results/whatif_public)")
    a = ap.parse_args(argv)
    if a.fit_public and a.out:  # it writes the package's specs, never a folder of the user's
        ap.error("--out: --fit-public writes conf/hardware/*.yaml, not --out (--check-public "
                 "writes tables there)")
    data = Path(a.data) if a.data else None
    if data is not None and not (data / "measurements.csv").exists():
        raise FileNotFoundError(f"{data}: no measurements.csv")
    if a.fit_public:
        for f in write_fitted(fitted_blocks(data)):
            print(f"wrote {f}")
        return 0
    df, s = run_check(data)
    out = Path(a.out) if a.out else WORK / "results" / "whatif_public"
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "whatif_public.csv", lambda p: df.to_csv(p, index=False))
    write_text(out / "whatif_public.md", markdown(df, s))
    write_text(out / "summary.json", json.dumps(s, indent=1))
    for st in ("decode", "prefill"):
        print(f"{st}: " + "; ".join(
            f"{KIND_WORDS[k]} median {_f(s[st][k].get('median'))}% p90 "
            f"{_f(s[st][k].get('p90'))}% (n={s[st][k]['n']})" for k in L.KINDS))
    for st in ("decode", "prefill"):
        iv = s[st]["interval"]
        if iv["n"]:
            print(f"{st} intervals ({iv['level']:.0%} claimed, the {iv['quantile']:.2f} quantile "
                  f"of the nested errors; leave-one-chip-out): coverage {iv['coverage']:.2f}, "
                  f"median half-width {iv['median_half_width_pct']:.1f}% (n={iv['n']}; at the "
                  f"{iv['level']:.2f} quantile: {iv['coverage_at_quantile_equal_to_level']:.2f})")
    print(f"wrote {out}/whatif_public.csv, whatif_public.md, summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
