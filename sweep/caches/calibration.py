"""The performance model's calibration: which kernel micro-benchmarks a study needs, kept per
device, never of whole models.

A calibration is a table of entries (one row each: ``kind``, its shape columns, ``time_s``,
``time_s_min``, ``time_s_p90``, ``family``) measured by ``sweep.measure.calibration_run``:

- ``gemm``: ``F.linear`` of ``[M, K] x [K, N]`` in the model dtype (weights read cold);
- ``gemv``: a Triton decode step's linear layer with its prologue (``kernels.decode_linear``:
  the GEMV or cuBLAS, as the model runs it), ``M <= 16`` rows;
- ``decode_attn``: one new token against a KV cache, torch and Triton, bf16 / int8 / fp8 caches;
- ``prefill_attn``: causal SDPA in the model's layouts;
- ``moe_gemm``: the MoE layer's two grouped GEMMs (``kernels.moe_gemm``) as the Triton path
  launches them, per step's tokens, experts, top-k and expert width, the router's choice
  uniform (as a random router's);
- ``elementwise`` (by bytes) and ``launch`` (fixed costs): whole groups, the same for every design.

**What is measured.** A study's calibration covers its own designs (``needs``): the exact GEMM,
GEMV and attention shapes ``sweep.analysis.predict.kernel_list`` will price for each design and
workload the study may run (``sweep.space.study_designs``: every design of a small space, a
bounded lattice of a large or continuous one), plus the groups a fit needs. ``ensure`` measures
only the entries the device's cache lacks, in one child process, and adds them to the cache
(``<results_dir>/calibration/<device>.{json,parquet}``): a later study measures only what it
adds. The first cache of a device we measured starts from the calibration shipped with the
package (``sweep/analysis/calibrations/``: H100, H200), so a shipped experiment there measures
nothing. ``python -m sweep.cli.calibrate`` measures the shipped grid (every shipped model and
experiment, GEMMs over ``sweep.caches.grids.M_GRID``) to refresh one.

**What it rests on.** Every row belongs to a ``family`` (``gemm``, ``gemv``, ``decode_attn/
triton``, ...) whose ``fingerprint`` is recorded in the meta: the code of the kernels and zoo
modules its time depends on (comments and docstrings left out), the switches that change what
they launch or how they are tuned (``kernels.switches``), the device, driver, torch and Triton;
the fixed costs (``launch``: the host's cost to issue ops and graphed steps) also the host they
were measured on, so a calibration shipped from, or transferred from, another machine has its
fixed costs measured on this one (``host_costs``). When a family's fingerprint no longer
matches, its rows are stale: ``ensure`` measures them again
(``policy='auto'``), or with ``policy='frozen'`` measures nothing and says ``stale`` in the meta,
which every prediction from it carries (``prediction_stale``; the fingerprints:
``sweep.analysis.fingerprints``). A changed kernel is never priced by its old time unknowingly.
Entries measured while another job used the device (``sweep.measure.contention``) are used and
kept, flagged ``contended``, and measured again by the next study that needs them and finds the
device free (the others kept, still flagged).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from pathlib import Path

from ..analysis import calibration_store as store
from ..analysis.calibration_store import CAL_DIR, VERSION, Calibration, load, paths, shipped
from ..analysis.fingerprints import family, fingerprints, stale_families
from ..analysis.needs import KEYS, entry_keys, merge, missing, needs
from ..common.env import environment
from ..common.locks import cache_lock, device_lock
from ..common.row import CONTENDED
from ..measure import contention
from .grids import attn_grid, grid_needs

POLICIES = ("auto", "frozen")
# the families measured as groups (launch, elementwise): one of their rows measured again, the
# group is measured whole
GROUP_FAMILIES = {"launch", "elementwise/torch", "elementwise/triton"}

def _spec(device_type: str, quick: bool, switches, want: dict, base: list, grid: list,
          tuning_dir) -> dict:
    """The measuring child's spec (``sweep.measure.calibration_run``)."""
    da = [dict(zip(KEYS["decode_attn"] + ("cap",), k)) for k in want.get("decode_attn", [])]
    da += grid
    return {"device": device_type, "quick": quick, "switches": switches.to_dict(),
            "tuning_dir": str(tuning_dir) if tuning_dir else None, "base": base,
            "gemm": [list(k[:3]) for k in want.get("gemm", [])],
            "gemv": [list(k[:4]) for k in want.get("gemv", [])],
            "decode_attn": da,
            "prefill_attn": [dict(zip(KEYS["prefill_attn"], k)) for k in want.get("prefill_attn",
                                                                                   [])],
            "moe_gemm": [dict(zip(KEYS["moe_gemm"], k)) for k in want.get("moe_gemm", [])]}


# the families ``ensure(again=...)`` measures again entry by entry (a decode-attention entry's key
# lacks the cache size it was timed with: those are measured again when their code changes)
AGAIN = ("gemm", "gemv", "moe_gemm", "prefill_attn", "prefill_attn/band", "launch",
         "elementwise/torch", "elementwise/triton")


def ensure(device: dict, items, switches, ceilings: dict | None = None,
           cal_dir: Path | None = None, tuning_dir: Path | None = None, policy: str = "auto",
           quick: bool | None = None, full: bool = False, timeout_s: float = 900.0,
           on_line=None, log=print, from_shipped: bool = True, again: tuple = ()) -> Calibration:
    """The device's calibration covering ``items`` (``(ModelConfig, workload, mode)``): the
    cache, started from the shipped calibration of this device if there is one, with the
    entries it lacks measured now in a child and added (stale families measured again), unless
    ``policy='frozen'``. ``full``: also the shipped grid (``python -m sweep.cli.calibrate``);
    ``from_shipped=False`` ignores the shipped calibration (a refresh measures everything);
    ``again``: families (``AGAIN``) whose every entry is measured again, as a stale one's, the
    shapes the table held kept (a family timed on a disturbed run).

    Returns:
        the ``Calibration``; its ``meta["stale"]`` lists the families measured under other
        fingerprints (``policy='frozen'``), ``meta["measured_now"]`` what this call measured.

    Raises:
        ValueError: an unknown ``policy``, a family of ``again`` not in ``AGAIN``.
        RuntimeError: the measurement failed (the child's error tail in the message).
    """
    if policy not in POLICIES:
        raise ValueError(f"calibration_policy={policy!r} is not one of {', '.join(POLICIES)}")
    if set(again) - set(AGAIN):
        raise ValueError(f"again={sorted(set(again) - set(AGAIN))}: families measured again "
                         f"entry by entry are {', '.join(AGAIN)}")
    # one process at a time reads, measures into and writes this device's cache: another
    # process's entries are found here, not measured twice nor written over
    with cache_lock(paths(device["name"], cal_dir)[1], f"the calibration of {device['name']}",
                    log):
        return _ensure(device, items, switches, ceilings, cal_dir, tuning_dir, policy, quick,
                       full, timeout_s, on_line, log, from_shipped, tuple(again))


# a GEMM entry read over this many times every entry of like FLOPs is a disturbed timing (the
# machine busy: a CPU's 2 x 512 x 128 GEMM read 20 ms beside its neighbours' 9-19 us and priced
# every later study 26x slow); the shipped tables' entries lie within 1.9x of theirs
OUTLIER = 10.0


def gemm_outliers(new, table, factor: float = OUTLIER) -> list[tuple]:
    """The ``(M, N, K, dtype)`` of ``new``'s GEMM entries whose ``time_s`` (s) exceeds ``factor`` x
    every other entry of like FLOPs (within 4x, the same dtype, in ``new`` or ``table``; at least
    two of them): timings to take again; ``[]`` when ``new`` holds no GEMM entry."""
    import pandas as pd

    if new is None or not len(new) or "kind" not in new or not (new.kind == "gemm").any():
        return []
    mine = new[new.kind == "gemm"]
    g = pd.concat([x for x in (table, new) if x is not None and "kind" in x], ignore_index=True)
    g = g[g.kind == "gemm"]
    fl = 2.0 * g.M * g.N * g.K
    out = []
    for _, r in mine.iterrows():
        f = 2.0 * r.M * r.N * r.K
        like = (g["dtype"] == r["dtype"]) & (fl >= f / 4) & (fl <= f * 4) \
            & ~((g.M == r.M) & (g.N == r.N) & (g.K == r.K))
        if like.sum() >= 2 and r.time_s > factor * g.time_s[like].max():
            out.append((int(r.M), int(r.N), int(r.K), r["dtype"]))
    return out


def groups(table, dropped: list, device_type: str) -> tuple:
    """``(table, base)``: the groups measured as one (``base``: ``launch``, ``elementwise``) where
    absent, or one of their families dropped (then whole, the kept rows removed from ``table``:
    with elementwise/torch kept, the Triton norms went unpriced); and ``graph_gap`` on a GPU whose
    launch group lacks it (its run's last step: a run cut off before it kept the rest, and the
    H100's shipped table went without it from 2026-12-07 03:43 to the next reship)."""
    base = []
    for g, fams in (("launch", ["launch"]),
                    ("elementwise", ["elementwise/torch", "elementwise/triton"])):
        if table is not None and table.family.isin(fams).any() and any(f in dropped for f in fams):
            table = table[~table.family.isin(fams)]
        if table is None or not table.family.isin(fams).any():
            base.append(g)
    if "launch" not in base and device_type == "cuda" and not (
            "op" in table and ((table.family == "launch") & (table.op == "graph_gap")).any()):
        base.append("graph_gap")
    return table, base


def _ensure(device, items, switches, ceilings, cal_dir, tuning_dir, policy, quick, full,
            timeout_s, on_line, log, from_shipped, again=()):
    import pandas as pd

    quick = device["type"] != "cuda" if quick is None else quick
    meta_p, tab_p = paths(device["name"], cal_dir)
    have = load(device["name"], cal_dir=cal_dir,
                on_error=lambda why: log(f"calibration: the cache {why}: measured again"))
    if have is None or have.meta.get("version") != VERSION:
        have = shipped(device["name"]) if from_shipped else None
        if have is not None:
            log(f"calibration: starting from the one shipped for {device['name']} "
                f"({have.meta.get('date')})")
    have = have or Calibration()
    meta, table = have.meta, have.table
    current = fingerprints(device, switches)
    stale = stale_families(meta, current) if table is not None else []
    if table is not None and "family" not in table:
        table = None  # an old table: no family per row
    asked, kept_keys = [], {}  # families measured again as asked; their shapes, as the table held
    if again and table is not None and policy == "auto":
        asked = sorted(set(again) & set(table.family))
        old = table[table.family.isin(asked)]
        kept_keys = {k: [x for x in entry_keys(old[old.kind == k], k) if x is not None]
                     for k in KEYS if (old.kind == k).any()}
        log(f"calibration: {', '.join(again)} measured again as asked ({len(old)} entries)")
    # (a group with one of them: measured whole)
    dropped = sorted(set(stale) | set(asked)) if policy == "auto" else []
    if stale and policy == "auto":
        log(f"calibration: {', '.join(stale)} measured under other kernels, versions or on another "
            "host: measured again")
    if dropped:
        table, stale = table[~table.family.isin(dropped)] if table is not None else None, []
    redo = (table is not None and policy == "auto" and CONTENDED in table
            and bool(table[CONTENDED].any()) and not contention.sample(device))
    if redo:  # those this study needs measured again, the rest kept (while busy: all kept)
        log(f"calibration: {int(table[CONTENDED].sum())} entries were measured while another job "
            "used the device: those this study needs are measured again")
        dropped = dropped + sorted(set(table.family[table[CONTENDED]]) & GROUP_FAMILIES)
    want = needs(items, device["type"])
    if full:
        want = merge(want, grid_needs(items, device["type"]))
    if kept_keys:
        want = merge(want, kept_keys)
    todo = missing(table[~table[CONTENDED]] if redo else table, want)
    table, base = groups(table, dropped, device["type"])
    grid = attn_grid(table, todo, device["type"], quick, full)
    n_todo = sum(map(len, todo.values())) + len(grid) + len(base)
    if policy == "frozen" or n_todo == 0:
        if table is None:
            raise RuntimeError(f"no calibration of {device['name']} and calibration_policy="
                               "frozen: nothing to price with")
        return Calibration(dict(meta, stale=stale, measured_now=0), table)
    from ..measure import calibration_run as run_cal

    (cal_dir or CAL_DIR).mkdir(parents=True, exist_ok=True)
    spec = _spec(device["type"], quick, switches, todo, base, grid, tuning_dir)
    what = [f"{k} {len(v)}" for k, v in todo.items() if v] + [f"group {g}" for g in base]
    log(f"calibration: measuring {n_todo} entries on {device['name']} ({', '.join(what)})")
    t0 = time.time()
    out = tab_p.with_name(f".{tab_p.stem}.{os.getpid()}.new.parquet")  # one per process
    last_log = tab_p.with_name(f".{tab_p.stem}.last.log")  # a child that succeeded leaves its log here
    part = out.with_name(out.name + ".partial")
    failed, cut = None, False
    try:
        # no trial of another study measures meanwhile; another job's use of the device seen
        with contention.measuring(device, log) as use:
            rc, tail = run_cal.run(spec, out, timeout_s, on_line, keep_log=last_log)
        if rc != 0 or not out.exists():
            failed = f"calibration failed: {tail}"
    except run_cal.ChildTimeout as e:
        failed = f"calibration {e}"
        cut = True
    if failed:  # keep the groups it finished: a later run measures only the rest
        new = pd.read_parquet(part) if part.exists() else None
        part.unlink(missing_ok=True)
        if new is not None and len(new):
            if use.get("contended"):
                new[CONTENDED] = True
            _save(meta_p, tab_p, meta, _kept(table, new) if redo else table, new, device, quick,
                  current, ceilings, time.time() - t0)
            if cut:
                raise CalibrationCut(f"{failed}; {len(new)} entries measured and saved")
        raise RuntimeError(failed)
    new = pd.read_parquet(out)
    out.unlink(missing_ok=True)
    if use.get("contended"):  # used now, measured again once the device is free
        log(f"calibration: measured while another job used the device "
            f"({use['contended_evidence']}): used now, measured again when it is free")
        new[CONTENDED] = True
    new = _again(new, table, device, quick, switches, tuning_dir, out, last_log, timeout_s,
                 on_line, log)
    saved = _save(meta_p, tab_p, meta, _kept(table, new) if redo else table, new, device, quick,
                  current, ceilings, time.time() - t0)
    return saved.with_(meta=dict(saved.meta, stale=[], measured_now=len(new)))


def _kept(table, new):
    """``table`` less its rows flagged ``contended`` whose entry ``new`` measured again."""
    import pandas as pd

    gone = pd.Series(False, index=table.index)
    for kind in KEYS:
        old = table[(table.kind == kind) & table[CONTENDED].astype(bool)]
        fresh = new[new.kind == kind] if "kind" in new else new.iloc[:0]
        if len(old) and len(fresh):
            have = set(entry_keys(fresh, kind)) - {None}
            gone[old.index] = [k in have for k in entry_keys(old, kind)]
    return table[~gone]


def _again(new, table, device, quick, switches, tuning_dir, out, last_log, timeout_s, on_line,
           log):
    """``new`` with its GEMM outliers (``gemm_outliers``) measured once more and the second
    timings in their place; as it was, said, when that measurement fails or runs out of time."""
    import pandas as pd

    from ..measure import calibration_run as run_cal

    odd = gemm_outliers(new, table)
    if not odd:
        return new
    log(f"calibration: {len(odd)} GEMM entries read over {OUTLIER:g}x every entry of like "
        "FLOPs (the machine busy?): measured again")
    try:
        with device_lock(device, log):
            rc, tail = run_cal.run(_spec(device["type"], quick, switches, {"gemm": odd}, [], [],
                                         tuning_dir), out, timeout_s, on_line, keep_log=last_log)
    except run_cal.ChildTimeout as e:
        rc, tail = 1, str(e)
    if rc != 0 or not out.exists():
        log(f"calibration: measuring them again failed ({tail.strip()[-200:]}): kept as they were")
        return new
    again = pd.read_parquet(out)
    out.unlink(missing_ok=True)
    if CONTENDED in new:  # (measured right after: as the rows it replaces)
        again[CONTENDED] = bool(new[CONTENDED].any())
    odd = set(odd)
    drop = [kind == "gemm" and (m, n, k, dt) in odd for kind, m, n, k, dt in
            zip(new.kind, new.M, new.N, new.K, new["dtype"])]
    return pd.concat([new[[not d for d in drop]], again], ignore_index=True)


def _save(meta_p, tab_p, meta, table, new, device, quick, current, ceilings, wall):
    """Add ``new`` rows to ``table``, write the cache (table, meta); the ``Calibration`` written."""
    import pandas as pd

    if len(new):
        band = [bool((w == w and w > 0) or (s == s and s > 0))  # (NaN: another kind's row)
                for w, s in zip(new.get("W", [0] * len(new)), new.get("sink", [0] * len(new)))]
        new["family"] = [family(k, i, b and k == "prefill_attn") for k, i, b in
                         zip(new.kind, new.get("impl", [None] * len(new)), band)]
    table = new if table is None else pd.concat([table, new], ignore_index=True)
    if CONTENDED in table:  # (rows measured alone, or before it was kept: False)
        table[CONTENDED] = table[CONTENDED].astype("boolean").fillna(False).astype(bool)
    wall = round(wall, 1)
    meta = {**{k: v for k, v in meta.items() if k not in ("stale", "measured_now")},
            "device": device["name"], "driver": device.get("driver"), **environment(device),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "quick": quick,
            "version": VERSION, "entries": len(table),
            "kinds": table.kind.value_counts().to_dict(), "fingerprints": current,
            "history": (meta.get("history") or [])[-20:] + [
                {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                 "entries": len(new), "wall_s": wall}],
            "wall_s": wall}
    cl = {k: v for k, v in (ceilings or {}).items()
          if k in ("copy_bytes_s", "gemm_flops_bf16", "gemm_flops_fp16", "gemm_flops_fp32",
                   "gemm_flops_bf16_sustained", "power_onset_s", "power_slowdown_by_duty")}
    if cl and not ceilings.get("contended_evidence"):  # (measured beside another job: the
        meta["ceilings"] = cl  # ones kept before stay; transfers and ridges read them)
    cal = Calibration(meta, table)
    store.write(meta_p, tab_p, cal)
    return cal


def host_costs(device: dict, cal: Calibration, switches, tuning_dir: Path | None = None,
               timeout_s: float = 300.0, log=print) -> Calibration:
    """A calibration from a file (another machine's, or another device's
    to be transferred) with its fixed costs (the ``launch`` family: the host's cost to issue ops
    and graphed steps, ``sweep.measure.fixed_costs``) measured on this machine, in a child, when
    they were measured elsewhere (their fingerprint differs from this host's); as given when
    they match. The GPU's own entries are left as they are.

    Raises:
        RuntimeError: the measurement failed (the child's error tail in the message).
    """
    import pandas as pd

    meta, table = cal.meta, cal.table
    current = fingerprints(device, switches)["launch"]
    if (meta.get("fingerprints") or {}).get("launch") == current:
        return cal
    log(f"calibration: the fixed costs of {meta.get('device')}'s calibration were measured on "
        f"another host: measuring this host's ({platform.node()})")
    from ..measure.calibration_run import measure_in_child

    with device_lock(device, log):
        new = measure_in_child(_spec(device["type"], device["type"] != "cuda", switches, {},
                                     ["launch"], [], tuning_dir), "fixed costs", timeout_s)
    new["family"] = "launch"
    table = pd.concat([table[table.family != "launch"], new], ignore_index=True)
    meta = dict(meta, fingerprints=dict(meta.get("fingerprints") or {}, launch=current),
                host_costs={"host": platform.node(), "entries": len(new),
                            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    return Calibration(meta, table)


class CalibrationCut(RuntimeError):
    """A calibration cut off by its time limit: its entries so far saved, a later run the rest."""


def calibrate(device: dict, designs, refresh: bool = False, quick: bool | None = None,
              ceilings: dict | None = None, cal_dir: Path | None = None, switches=None,
              workload: dict | None = None, timeout_s: float = 1800.0, on_line=None, log=print,
              tuning_dir: Path | None = None, again: tuple = ()):
    """The shipped grid's calibration of ``device`` over ``designs`` (ModelConfigs, at
    ``workload``, default batch 1 / 512 + 128 tokens; or ``(ModelConfig, workload, mode)``
    items, ``sweep.space.shipped_items``): ``ensure`` with ``full``; ``refresh`` measures
    everything again (the cache's table is set aside first); ``again``: families whose every
    entry is measured again (``ensure``). Returns the ``Calibration``."""
    from kernels.switches import Switches

    switches = switches or Switches()
    meta_p, tab_p = paths(device["name"], cal_dir)
    if refresh:
        for p in (meta_p, tab_p):
            p.unlink(missing_ok=True)
    wl = workload or {"batch": 1, "prompt_len": 512, "new_tokens": 128}
    mode = "cudagraph" if device["type"] == "cuda" else "eager"
    items = [c if isinstance(c, tuple) else (c, wl, mode) for c in designs]
    return ensure(device, items, switches, ceilings, cal_dir, tuning_dir, quick=quick, full=True,
                  timeout_s=timeout_s, on_line=on_line, log=log, from_shipped=not refresh,
                  again=again)
