"""``python -m sweep.cli.validate --set heldout [--only NAME ...] [--calibration FILE] [--out DIR]``:
the performance model judged on a validation set (``conf/validation/<set>.yaml``).

Each pair is measured as a study measures a design (``sweep.measure.trial`` in a child process;
warm-up, medians over repeats) and priced by the performance model: from this device's
calibration, its own shapes measured first (``sweep.caches.calibration.ensure``), or from
``--calibration FILE`` (another device's: transferred to a GPU by a sample of its own entries
timed here, ``sweep.caches.transfer``, else by the ceilings' ratio), its fixed costs measured on
this host (``sweep.caches.calibration.host_costs``). The
error table, the summary per stage and category and the interval's coverage go to
``<results_dir>/validate/<set>-<device>/`` (``<set>.csv``, ``summary.json``, ``<set>.md``;
``sweep.analysis.validation``). Exit code 1 when a target of the summary is missed (``--targets
none`` reports only), 2 on bad input.

The held-out set is for checking only: nothing in the model may be tuned on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from ..common.env import CONF, slug, work_path
from ..common.row import TIME

WARMUP, REPEATS = 2, 5


def load_set(name: str) -> dict:
    """``conf/validation/<name>.yaml`` (or a path).

    Raises:
        FileNotFoundError: no such set. ValueError: a pair without a name, model or workload.
    """
    p = Path(name) if name.endswith(".yaml") else CONF / "validation" / f"{name}.yaml"
    if not p.exists():
        known = sorted(q.stem for q in (CONF / "validation").glob("*.yaml"))
        raise FileNotFoundError(f"no validation set {name!r}; known: {', '.join(known)}")
    try:
        s = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(s, dict) or "name" not in s or not isinstance(s.get("pairs"), list):
        raise ValueError(f"{p}: not a validation set (a mapping with name: and pairs: [...])")
    for i, pair in enumerate(s["pairs"]):
        if not isinstance(pair, dict):
            raise ValueError(f"{p.name}: pair {i} is not a mapping")
        missing = [k for k in ("name", "model", "batch", "prompt_len", "new_tokens") if k not in pair]
        if missing:
            raise ValueError(f"{p.name}: pair {i} lacks {', '.join(missing)}")
        for k in ("batch", "prompt_len", "new_tokens"):  # before any calibration or measurement
            v = pair[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{p.name}: pair {pair['name']}: {k}={v!r} must be a whole "
                                 "number >= 1")
    return s


def items(s: dict, device_type: str, only: list[str] | None = None) -> list[tuple]:
    """``(pair, ModelConfig, workload, mode)`` of each pair (``only``: these names), the design
    resolved for the device and checked.

    Raises:
        DesignError: an invalid design (named by its pair).
    """
    from zoo import DesignError, ModelConfig

    out = []
    for p in s["pairs"]:
        if only and p["name"] not in only:
            continue
        try:
            cfg = ModelConfig.from_name(p["model"], **(p.get("over") or {})).resolved(device_type)
            cfg.validate()
        except DesignError as e:
            raise DesignError(f"pair {p['name']}: {e}") from None
        wl = {"batch": p["batch"], "prompt_len": p["prompt_len"], "new_tokens": p["new_tokens"],
              "warmup": p.get("warmup", WARMUP), "repeats": p.get("repeats", REPEATS)}
        mode = p.get("mode", "cudagraph" if device_type == "cuda" else "eager")
        out.append((p, cfg, wl, mode))
    return out


def measure(chosen: list[tuple], device: dict, out: Path, switches, tuning_dir: Path) -> list:
    """Each pair's measured figures (a trial child each), or its failure; each also appended to
    ``<out>/measured.jsonl`` as it comes (a run cut off keeps what it measured)."""
    from ..measure.child import child_failure, run_child, trial_spec

    res = []
    log = out / "measured.jsonl"
    for i, (p, cfg, wl, mode) in enumerate(chosen):
        spec = trial_spec(cfg, wl, device["type"], mode, out / p["name"], switches=switches,
                          tuning_dir=tuning_dir)
        r = run_child(spec, out / "trials" / p["name"], 900.0)
        ok = r.get("status") == "ok"
        print(f"[{i + 1}/{len(chosen)}] {p['name']}: "
              + (f"TPOT {r['measured'][TIME['decode']]:.3f} ms, TTFT "
                 f"{r['measured'][TIME['prefill']]:.2f} ms" if ok else child_failure(r)), flush=True)
        res.append(r["measured"] if ok else {"fail_reason": child_failure(r)})
        with open(log, "a") as f:
            f.write(json.dumps({"name": p["name"], "measured": res[-1],
                                "env": r.get("env", {})}, default=str) + "\n")
    return res


def read_measured(path: Path, chosen: list[tuple]) -> tuple[list[tuple], list]:
    """The pairs of ``chosen`` measured in an earlier run (its ``measured.jsonl``), and their
    figures; pairs it lacks are left out."""
    got = {}
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                d = json.loads(line)
                got[d["name"]] = d["measured"]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{path}: line {i} is not a measured pair ({{\"name\": ..., "
                                 "\"measured\": {...}} as measured.jsonl writes)") from None
    kept = [c for c in chosen if c[0]["name"] in got]
    if not kept:
        raise ValueError(f"{path}: measures no pair of the set ({', '.join(got) or 'empty'})")
    return kept, [got[c[0]["name"]] for c in kept]


def price(chosen: list[tuple], measured: list, calibration, spec, ceilings: dict, switches):
    """The table: one row per pair with its design, workload, measured figures and the
    performance model's columns (``sweep.analysis.predict.row_predictions``)."""
    import pandas as pd

    from ..analysis.predict import row_predictions

    rows = []
    for (p, cfg, wl, mode), m in zip(chosen, measured):
        row = {"name": p["name"], "cat": list(p.get("cat", [])), "model": cfg.name,
               **{k: getattr(cfg, k) for k in ("n_layers", "d_model", "n_heads", "n_kv_heads",
                                               "head_dim", "ffn_dim", "kv_dtype", "kernels")},
               "mode": mode, **{k: wl[k] for k in ("batch", "prompt_len", "new_tokens")}, **m}
        ok = "fail_reason" not in m
        row.update(row_predictions(cfg, wl, spec, calibration, mode, ceilings,
                                   m if ok else None, switches=switches))
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    """The command line (the module's text): 0 when the summary meets the targets (or
    ``--targets none``), 1 when it misses one.

    Raises:
        ValueError: an unknown spec or pair, a file that is not a calibration. FileNotFoundError:
            no set, no calibration file, no cached or shipped calibration for ``--measured``.
    """
    from kernels.switches import Switches

    from ..analysis import anchors, pricing
    from ..analysis import calibration_store as store
    from ..analysis import validation as V
    from ..analysis.hardware import load_spec
    from ..caches import calibration as cal
    from ..caches.ceiling_cache import measure_ceilings
    from ..caches.transfer import transfer_here
    from ..common.atomic import write_atomic, write_json, write_text
    from ..common.env import detect_device, environment

    ap = argparse.ArgumentParser(prog="python -m sweep.cli.validate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="heldout", help="conf/validation/<set>.yaml (or a path)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these pairs only")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--hardware", default="auto", help="the device's spec (conf/hardware)")
    ap.add_argument("--calibration", help="price from this calibration .json (another device's: "
                                          "transferred to a GPU by a sample of its entries timed "
                                          "here, else by the ceilings' ratio)")
    ap.add_argument("--results-dir", default="results")
    ap.add_argument("--out", help="output folder (default <results_dir>/validate/<set>-<device>)")
    ap.add_argument("--measured", metavar="JSONL",
                    help="price the pairs an earlier run measured (its measured.jsonl) instead "
                         "of measuring them again: e.g. another device's calibration on them")
    ap.add_argument("--targets", choices=["held-out", "none"],
                    help="held-out: exit 1 when the summary misses the held-out issue's targets "
                         "(the default on a GPU; none on the CPU, whose tiny set they do not fit)")
    a = ap.parse_args(argv)
    s = load_set(a.set)
    dev = detect_device(a.device)
    # an unknown spec is refused before any work
    spec = load_spec(a.hardware, dev["name"]) if a.hardware == "auto" else load_spec(a.hardware)
    given = store.load_file(a.calibration) if a.calibration else None  # refused before any work
    a.targets = a.targets or ("held-out" if dev["type"] == "cuda" else "none")
    chosen = items(s, dev["type"], a.only)
    if not chosen:
        raise ValueError(f"no pair of {s['name']} is named {a.only}")
    real = sorted({p["model"] for p, *_ in chosen if p["model"] != "tiny"})
    if dev["type"] == "cpu" and real and not a.measured:  # hours of 8B decode on the cores
        raise ValueError(f"--set {a.set} measures real-size designs ({', '.join(real)}): a GPU's "
                         "set; on the CPU, --set heldout_cpu (the same mechanics on the tiny "
                         "model), or --measured JSONL to price a GPU run's measurements")
    if a.measured:  # read and checked before any work or output
        chosen, measured = read_measured(Path(a.measured), chosen)
    root = work_path(a.results_dir)
    out = Path(a.out) if a.out else root / "validate" / f"{s['name']}-{slug(dev['name'])}"
    out.mkdir(parents=True, exist_ok=True)
    ceilings = measure_ceilings(dev, cache_dir=root / "ceilings")
    switches = Switches()
    if a.calibration:
        if not a.measured:  # the host's fixed costs are this machine's, whoever measured the file
            given = cal.host_costs(dev, given, switches, root / "tuning")
        c = pricing.Calibrated(given)
        if given.device != dev["name"] and a.measured:  # offline: no anchors timed here
            c = anchors.transfer(c, given.meta["ceilings"], dict(ceilings, device=dev["name"]),
                                 chosen[0][1].dtype)
        elif given.device != dev["name"]:
            c, here = transfer_here(dev, given, ceilings, chosen[0][1].dtype, switches,
                                    root / "tuning")
            if here:
                write_json(out / "anchors.json", here)
    elif a.measured:  # priced where it was measured: that device's cached calibration
        have = store.load(dev["name"], cal_dir=root / "calibration") or \
            store.with_code_staleness(store.shipped(dev["name"]))
        if have is None:
            raise FileNotFoundError(f"no calibration of {dev['name']} under {root}")
        c = pricing.Calibrated(have)
    else:
        c = pricing.Calibrated(cal.ensure(dev, [(c_, w, m) for _, c_, w, m in chosen], switches,
                                       ceilings, cal_dir=root / "calibration",
                                       tuning_dir=root / "tuning"))
    # what the prices rest on, kept beside them (a transferred or host-measured table is made
    # here, on this machine): the table and its meta
    write_atomic(out / "calibration.parquet", lambda p: c.t.to_parquet(p, index=False))
    write_json(out / "calibration.json", c.meta)
    if not a.measured:
        measured = measure(chosen, dev, out, switches, root / "tuning")
    df = price(chosen, measured, c, spec, ceilings, switches)
    summ = V.summary(df)
    checks = V.passes(summ) if a.targets == "held-out" else {}
    write_atomic(out / f"{s['name']}.csv", lambda p: df.to_csv(p, index=False))
    write_json(out / "summary.json", {"set": s["name"], "env": environment(dev),
                                      "calibration": c.meta.get("device"),
                                      "transferred": bool(c.meta.get("transferred_to")),
                                      "summary": summ, "checks": checks})
    text = V.markdown(df, summ, f"{s['name']} on {dev['name']} (calibration: "
                                f"{c.meta.get('device')}"
                                + (", transferred" if c.meta.get("transferred_to") else "") + ")")
    write_text(out / f"{s['name']}.md", text)
    # the title, the contended pairs where some were, and the errors per stage, in %
    print("\n\n".join(text.split("\n\n")[:3 if summ.get("contended") else 2]))
    if checks:
        print(json.dumps(checks, indent=1))
    print(f"wrote {out}/{s['name']}.csv, {s['name']}.md, summary.json")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    from ..common.entry import entry

    sys.exit(entry(main))
