"""Autotuning choices kept across processes, per device: a new process never tunes a shape again.

Triton's autotuner keeps its choice for a shape in memory only, so every measuring process (each
trial is one) timed every candidate tile config of every decode GEMV and attention shape again,
and on a fresh machine compiled each of them first (~60-120 s per design on an H100). Here each
choice is written down per ``(kernel, shape key)`` for the device it was made on:

- ``kernels/tuned/<device>.json``: shipped with the package, the choices made on the GPUs we
  measured (the shipped experiments' shapes), read only;
- ``<results_dir>/tuning/<device>.json`` (``configure``): this machine's, read and extended by
  every process (``save`` merges, atomically), so a shape is tuned once per device.

Each kernel's choices carry the fingerprint of its source (``fingerprint``: the module's code
without comments or docstrings) and the Triton version; choices of another fingerprint are
ignored, never applied to a changed kernel. For a shape no file knows, ``candidates`` bounds the
autotune space to the configs chosen for the kernel's other shapes on this device, so a new shape
compiles a few configs, not every one.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent / "tuned"
# the modules whose code decides what each kernel's choice means
SOURCES = {"gemv": ("gemv", "graph_timing"),
           "decode_attention": ("decode_attention", "split_merge", "graph_timing"),
           "decode_linear": ("gemv", "decode_linear", "graph_timing", "rmsnorm", "swiglu")}

_dir: Path | None = None
_files: dict[str, dict] = {}  # device -> {kernel: {key: value}} read from the files
_new: dict[str, dict] = {}  # device -> {kernel: {key: value}} chosen in this process


def slug(text: str) -> str:
    """A file-name-safe lower-case form of a device name (as ``sweep.common.env.slug``)."""
    return re.sub(r"[^a-z0-9.-]+", "_", text.lower()).strip("_")


@functools.cache
def module_code(name: str) -> str:
    """The code of ``kernels/<name>.py`` (or a path) without comments, docstrings and blank
    lines: what a fingerprint hashes, so an edit of a comment does not invalidate a measurement.
    Plain text (the source with those spans cut), so it reads the same under every Python."""
    import io
    import tokenize

    path = Path(name) if name.endswith(".py") else Path(__file__).resolve().parent / f"{name}.py"
    src = path.read_text()
    drop: set[int] = set()  # lines of docstrings
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            drop |= set(range(body[0].lineno, body[0].end_lineno + 1))
    lines = src.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:  # cut the comment from its line
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(line.rstrip() for i, line in enumerate(lines, 1)
                     if i not in drop and line.strip())


def fingerprint(*parts: str, modules: tuple[str, ...] = ()) -> str:
    """Twelve hex digits of the SHA-256 of ``modules``' code (``module_code``) and ``parts``
    (versions, switches)."""
    h = hashlib.sha256()
    for m in modules:
        h.update(module_code(m).encode())
    for p in parts:
        h.update(str(p).encode())
    return h.hexdigest()[:12]


@functools.cache
def kernel_fingerprint(kernel: str) -> str:
    """The fingerprint a choice of ``kernel`` is valid under: its sources and Triton's version."""
    import triton

    return fingerprint(triton.__version__, modules=SOURCES[kernel])


def configure(directory: str | Path | None) -> None:
    """Read and keep this machine's choices in ``directory`` (``<results_dir>/tuning``); None:
    the shipped choices only, new ones kept in memory."""
    global _dir
    _dir = Path(directory) if directory else None
    _files.clear()


def key_text(key: tuple) -> str:
    """The text form of a shape key in the files: its parts joined by ``|``."""
    return "|".join(str(k) for k in key)


def _load(device: str) -> dict:
    if device not in _files:
        merged: dict = {}
        for path in (SHIPPED_DIR / f"{slug(device)}.json",
                     _dir / f"{slug(device)}.json" if _dir else None):
            if path is None or not path.exists():
                continue
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a damaged file: tuned again, then rewritten
            for kernel, sec in data.get("kernels", {}).items():
                if kernel in SOURCES and sec.get("fingerprint") == kernel_fingerprint(kernel):
                    merged.setdefault(kernel, {}).update(sec.get("choices", {}))
        _files[device] = merged
    return _files[device]


def lookup(kernel: str, key: tuple, device: str):
    """The choice recorded for ``kernel`` at ``key`` on ``device`` (a config dict, or a word), or
    None."""
    k = key_text(key)
    got = _new.get(device, {}).get(kernel, {}).get(k)
    got = got if got is not None else _load(device).get(kernel, {}).get(k)
    return got["best"] if isinstance(got, dict) and "best" in got else got


def record(kernel: str, key: tuple, value, device: str, runners_up: list | None = None) -> None:
    """Note a choice made in this process (written by ``save``); ``runners_up``: the next
    fastest configs of the same tuning, for ``candidates``."""
    entry = {"best": value, "top": [value] + list(runners_up or [])} if runners_up is not None \
        else value
    _new.setdefault(device, {}).setdefault(kernel, {})[key_text(key)] = entry


def ranked(tuner, most: int = 3) -> tuple[dict, list]:
    """``(best config, the next fastest up to most - 1)`` of a Triton autotuner's last tuning,
    as dicts (``config_dict``); only the best where it kept no timings."""
    best = config_dict(tuner.best_config)
    timings = getattr(tuner, "configs_timings", None) or {}

    def t(v):
        return v[0] if isinstance(v, (list, tuple)) else v

    order = [config_dict(c) for c, _ in sorted(timings.items(), key=lambda kv: t(kv[1]))]
    return best, [c for c in order if c != best][:most - 1]


def candidates(kernel: str, variant: str, device: str, most: int = 4) -> list:
    """Up to ``most`` distinct configs of ``kernel`` on ``device`` among the fastest few of each
    shape tuned before whose key starts with ``variant`` (the kernel's other shapes), the most
    often among them first; [] if none: a new shape is then tuned over these alone."""
    counts: dict[str, list] = {}
    for src in (_load(device).get(kernel, {}), _new.get(device, {}).get(kernel, {})):
        for k, v in src.items():
            if not k.startswith(variant):
                continue
            top = v.get("top", [v.get("best")]) if isinstance(v, dict) and "best" in v else [v]
            for rank, c in enumerate(top):
                s = json.dumps(c, sort_keys=True)
                counts.setdefault(s, [0.0, c])[0] += 1.0 / (1 + rank)
    ranked_ = sorted(counts.values(), key=lambda c: -c[0])
    return [v for _, v in ranked_[:most]]


def save() -> list[Path]:
    """Merge this process's new choices into ``<dir>/<device>.json`` (atomically, holding the
    file's lock: two processes saving at once both keep their choices; a kernel's choices of
    another fingerprint are replaced). Returns the files written; none without ``configure``."""
    if _dir is None or not _new:
        return []
    from filelock import FileLock

    _dir.mkdir(parents=True, exist_ok=True)
    out = []
    for device, kernels in _new.items():
        path = _dir / f"{slug(device)}.json"
        with FileLock(str(path.with_name(path.name + ".lock"))):  # read, merge, write: one process
            out.append(_merge_into(path, device, kernels))
    return out


def _merge_into(path: Path, device: str, kernels: dict) -> Path:
    """Merge ``kernels``' choices into the file at ``path`` (atomically; a kernel's choices of
    another fingerprint are replaced); returns ``path``."""
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        data = {}  # a damaged file: rewritten with this process's choices
    data["device"] = device
    secs = data.setdefault("kernels", {})
    for kernel, choices in kernels.items():
        fp = kernel_fingerprint(kernel)
        if secs.get(kernel, {}).get("fingerprint") != fp:
            secs[kernel] = {"fingerprint": fp, "choices": {}}
        secs[kernel]["choices"].update(choices)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return path


def ship(source: str | Path, shipped_dir: str | Path | None = None,
         triton_version: str | None = None) -> Path:
    """Merge a machine's choices file ``source`` (``<results_dir>/tuning/<device>.json``) into the
    shipped one of the same name (atomically). Only sections valid under the current
    fingerprint count, from either file: per kernel, the shipped choices are kept and the
    source's added over them; a source section of another fingerprint (a kernel this machine
    did not tune again since it changed) is left out. So shipping after one kernel changed keeps
    every other kernel's choices. ``triton_version``: the Triton the choices were made under,
    default this machine's (shipping on a machine of another Triton, e.g. a CPU host merging a
    GPU host's file, must name the GPU host's, or every section reads as stale and is left out).
    Returns the shipped path.

    Raises:
        OSError: ``source`` cannot be read.
        ValueError: ``source`` is not a choices file (a JSON object whose ``kernels`` sections
            each hold a ``fingerprint`` and ``choices``).
    """
    source = Path(source)
    new = json.loads(source.read_text())
    if not isinstance(new, dict) or not isinstance(new.get("kernels", {}), dict) or any(
            not isinstance(sec, dict) or "choices" not in sec or "fingerprint" not in sec
            for sec in new.get("kernels", {}).values()):
        raise ValueError(f"{source} is not a choices file (kernels -> fingerprint, choices)")
    dest = Path(shipped_dir or SHIPPED_DIR) / source.name
    try:
        old = json.loads(dest.read_text()) if dest.exists() else {}
    except ValueError:
        old = {}
    old = old if isinstance(old, dict) else {}

    def valid(k: str) -> str:
        return (fingerprint(triton_version, modules=SOURCES[k]) if triton_version
                else kernel_fingerprint(k))

    def current(sections: dict) -> dict:
        return {k: sec for k, sec in sections.items() if k in SOURCES and isinstance(sec, dict)
                and sec.get("fingerprint") == valid(k)}

    secs = current(old.get("kernels", {}))
    for kernel, sec in current(new.get("kernels", {})).items():
        if kernel in secs:
            secs[kernel] = {**sec, "choices": {**secs[kernel]["choices"], **sec["choices"]}}
        else:
            secs[kernel] = sec
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**old, **new, "kernels": secs}, indent=1, sort_keys=True))
    os.replace(tmp, dest)
    return dest


def launch(name: str, kernel, tuner, grid, args: tuple, kwargs: dict, variant: tuple,
           shape: tuple, device, allowed: list) -> None:
    """Launch Triton ``kernel`` with the config kept for ``variant + shape`` on ``device``;
    without one, through its autotuner ``tuner`` (whose early-prune hook keeps the configs in
    ``allowed``: set here to ``candidates`` of the variant, the fastest of its other shapes),
    then keep the choice (``record``). ``grid``: a function of the config's meta-parameters."""
    key, dev = variant + shape, device_name(device)
    cfg = lookup(name, key, dev)
    if cfg is not None:
        cfg = dict(cfg)
        kernel[grid(cfg)](*args, **kwargs, **cfg)
        return
    allowed[:] = candidates(name, key_text(variant) + "|", dev)
    try:
        tuner[grid](*args, **kwargs)
    finally:
        allowed.clear()
    best, runners = ranked(tuner)
    record(name, key, best, dev, runners)


def config_dict(cfg) -> dict:
    """A ``triton.Config`` as a JSON-able dict: its kwargs, ``num_warps``, ``num_stages`` and,
    where the config caps them, ``maxnreg`` (registers a thread; a launch takes the dict back as
    keyword arguments, so a capped choice is launched capped)."""
    cap = getattr(cfg, "maxnreg", None)
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
            **({"maxnreg": cap} if cap else {})}


def device_name(device) -> str:
    """The CUDA device's name, as the tuning files are keyed (``torch.cuda.get_device_name``)."""
    return _device_name(device.index if device.index is not None else -1)


@functools.cache
def _device_name(index: int) -> str:
    import torch

    return torch.cuda.get_device_name(None if index < 0 else index)
