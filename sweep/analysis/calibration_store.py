"""The calibration store: where a device's calibration lives, and reading and writing it.

A calibration (``Calibration``: meta and table, one object wherever it goes) is two files,
``<device>.json`` (the meta: device, versions, fingerprints, history) and ``<device>.parquet``
(the table of entries), kept per device in ``results/calibration`` (or a
study's ``cache_dir``) and shipped for the GPUs we measured in ``sweep/analysis/calibrations/``.
The table's file also holds the meta (parquet key-value metadata): one atomic write replaces both,
so a reader never pairs a new table with an old meta; the ``.json`` is the same meta for people
and for files shipped before. A truncated or empty file is reported and read as none there.
What the entries are and how they are measured: ``sweep.caches.calibration``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..common.atomic import write_atomic, write_json
from ..common.env import WORK, slug
from .fingerprints import code_stale

CAL_DIR = WORK / "results" / "calibration"
SHIPPED_DIR = Path(__file__).resolve().parent / "calibrations"
VERSION = 8  # of the table's columns and families: a cache of another version is measured again


# the columns ``sweep.analysis.pricing`` selects on: ``kind`` and each kind's shape columns
SHAPE_COLUMNS = ("kind", "op", "dtype", "impl", "kv_dtype", "M", "N", "K")


@dataclass(frozen=True)
class Calibration:
    """One device's calibration: its meta and its table of entries, read and written together.

    Attributes:
        meta: the JSON meta (``device``, versions, ``fingerprints``, ``ceilings``, ``history``;
            ``stale`` and ``measured_now`` as ``sweep.caches.calibration.ensure`` returns it).
        table: the entries (pandas DataFrame; ``kind``, ``family``, the shape columns,
            ``time_s``, ``time_s_min``, ``time_s_p90`` in s); None for no entries yet.
    """

    meta: dict = field(default_factory=dict)
    table: object = None
    # the pricing's selections of ``table``'s rows, shared by every ``pricing.Calibrated`` of
    # this calibration (the table is never changed in place; ``with_`` makes a new one)
    selections: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def device(self) -> str:
        """The device it was measured on (its ``torch.cuda.get_device_name``, or ``cpu``)."""
        return str(self.meta.get("device", ""))

    def entries(self):
        """The table with every column the pricing selects on (``SHAPE_COLUMNS``; NaN where no
        entry has it: a table of elementwise entries only has no ``dtype``), empty for none."""
        import pandas as pd

        t = self.table if self.table is not None else pd.DataFrame(columns=["time_s", "family"])
        missing = [c for c in SHAPE_COLUMNS if c not in t]
        return t.assign(**{c: math.nan for c in missing}) if missing else t

    def with_(self, meta: dict | None = None, table=None) -> Calibration:
        """A copy with ``meta`` and/or ``table`` replaced."""
        return Calibration(self.meta if meta is None else meta,
                           self.table if table is None else table)


def paths(device_name: str, cal_dir: Path | None = None) -> tuple[Path, Path]:
    """``(<device>.json, <device>.parquet)`` in ``cal_dir`` (default ``results/calibration``)."""
    base = (cal_dir or CAL_DIR) / slug(device_name)
    return base.with_suffix(".json"), base.with_suffix(".parquet")


def shipped(device_name: str) -> Calibration | None:
    """The calibration shipped with the package for ``device_name`` (of this
    ``VERSION``, with its fingerprints), or None."""
    have = load(device_name, where=paths(device_name, SHIPPED_DIR)[0])
    if have is None or have.meta.get("version") != VERSION or not have.meta.get("fingerprints") \
            or "family" not in have.table:
        return None
    return have


def shipped_for(spec) -> Calibration | None:
    """The shipped calibration of the GPU a hardware ``spec`` describes (one
    whose device name the spec's ``match`` patterns match), its families stale under today's
    code named (``with_code_staleness``), or None."""
    import re

    for meta_p in sorted(SHIPPED_DIR.glob("*.json")):
        meta = json.loads(meta_p.read_text())
        if any(re.search(p, meta.get("device", "")) for p in spec.match or []):
            return with_code_staleness(shipped(meta["device"]))
    return None


def with_code_staleness(have: Calibration | None) -> Calibration | None:
    """A shipped calibration priced from as it is (on another machine, nothing measured again):
    ``meta["stale"]`` lists its families measured under other code than the tree's
    (``fingerprints.code_stale``), ``meta["stale_why"]`` says so; every prediction from it
    carries them (``prediction_stale``, ``prediction_notes``). None stays None."""
    stale = code_stale(have.meta) if have is not None else []
    if not stale:
        return have
    return have.with_(meta=dict(have.meta, stale=stale, stale_why=(
        "shipped before these kernels changed, measured again on that GPU's first use")))


def load(device_name: str, where: Path | None = None, cal_dir: Path | None = None,
         on_error=None) -> Calibration | None:
    """The cached calibration of ``device_name`` (or of the files at
    ``where``, a ``.json`` path), or None: none there, or unreadable (a truncated or empty file;
    ``on_error`` is told which and why, so the caller can say it measures again)."""
    meta_p, tab_p = (Path(where), Path(where).with_suffix(".parquet")) if where else \
        paths(device_name, cal_dir)
    if not meta_p.exists() or not tab_p.exists():
        return None
    try:
        return _read(meta_p, tab_p)
    except ValueError as e:
        if on_error is not None:
            on_error(str(e))
        return None


META_KEY = b"designzoo_calibration_meta"  # the meta inside the table's file: one atomic write


def _read(meta_p: Path, tab_p: Path) -> Calibration:
    """The calibration in these files; the meta kept inside the parquet file where it is (``_save``), else the
    ``.json`` (a shipped or older file).

    Raises:
        ValueError: either file unreadable (named, with the cause)."""
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(tab_p)
    except Exception as e:  # noqa: BLE001 - pyarrow's errors: truncated, empty, not parquet
        raise ValueError(f"{tab_p}: unreadable ({type(e).__name__}: {e})") from None
    embedded = (t.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(embedded if embedded is not None else meta_p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{meta_p}: unreadable ({e})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_p}: not a calibration's meta (not a JSON object)")
    return Calibration(meta, t.to_pandas())


def load_file(path) -> Calibration:
    """The calibration a user named (``--calibration FILE.json``, its table
    the ``.parquet`` beside it).

    Raises:
        FileNotFoundError: either file is missing (both named). ValueError: either file is not a
            calibration's (not JSON, not an object, not a parquet table).
    """
    meta_p = Path(path)
    tab_p = meta_p.with_suffix(".parquet")
    if meta_p.suffix != ".json" or not meta_p.is_file() or not tab_p.is_file():
        raise FileNotFoundError(f"{path}: no calibration here (a .json and the .parquet beside "
                                f"it: {meta_p.with_suffix('.json').name}, {tab_p.name})")
    try:
        json.loads(meta_p.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not a calibration's .json ({e})") from None
    return _read(meta_p, tab_p)


def write(meta_p: Path, tab_p: Path, cal: Calibration) -> None:
    """Write ``cal.table`` (a DataFrame) to ``tab_p`` with ``cal.meta`` inside (one atomic write:
    a reader sees both old or both new), then the meta again as ``meta_p`` (``.json``) beside it,
    for people and the shipped layout."""
    meta, table = cal.meta, cal.table
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.Table.from_pandas(table, preserve_index=False)
    text = json.dumps(meta, default=str).encode()
    t = t.replace_schema_metadata({**(t.schema.metadata or {}), META_KEY: text})
    write_atomic(tab_p, lambda p: pq.write_table(t, p))
    write_json(meta_p, meta)


