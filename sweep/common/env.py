"""The environment a figure was measured in: device, versions, commit. Every results row carries it."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the source tree, or site-packages when installed
# A source tree (a clone, an editable install) keeps conf/ and results/ at its root. An installed
# designzoo (``pip install .``) has the configuration as package data (``sweep/conf``, mapped from
# conf/ in pyproject.toml) and writes results/ under the folder it is started from.
SOURCE_TREE = (REPO / "pyproject.toml").is_file() and (REPO / "conf").is_dir()
CONF = REPO / "conf" if SOURCE_TREE else Path(__file__).resolve().parents[1] / "conf"
WORK = REPO if SOURCE_TREE else Path.cwd()  # relative output folders (results/) live under it


def work_path(path: str | Path) -> Path:
    """A configured folder (``results_dir``, ``cache_dir``, ``--results-dir``): as given when
    absolute, else under ``WORK`` (the source tree, or the folder an installed designzoo is
    started from)."""
    p = Path(path)
    return p if p.is_absolute() else WORK / p


def _nvml_device(index: int = 0) -> dict | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        cc = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        drv = pynvml.nvmlSystemGetDriverVersion()
        drv = drv.decode() if isinstance(drv, bytes) else drv
        mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
        return {"type": "cuda", "name": name, "compute_capability": tuple(cc), "driver": drv,
                "memory_bytes": int(mem), "index": index}
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


@cache
class NoDevice(RuntimeError, ValueError):
    """The device asked for is not there (bad input for a command: exit code 2)."""


def detect_device(requested: str = "auto") -> dict:
    """Facts about the device a trial will run on, read without creating a CUDA context.

    Args:
        requested: ``auto`` (the first visible GPU, else the CPU), ``cuda`` or ``cpu``.

    Returns:
        ``{"type": "cuda"|"cpu", "name", "compute_capability", "driver", "memory_bytes"}``; a
        CPU's also ``processor`` (model name) and ``threads`` (the cores it measures with).

    Raises:
        NoDevice (a RuntimeError and a ValueError): ``cuda`` requested but no GPU is
            visible. ValueError: ``requested`` is not
            auto, cuda or cpu.
    """
    if requested not in ("auto", "cuda", "cpu"):
        raise ValueError(f"device={requested!r} is not one of auto, cuda, cpu")
    if requested != "cpu" and os.environ.get("CUDA_VISIBLE_DEVICES", None) != "":
        dev = _nvml_device(_first_visible())
        if dev is None:
            import torch

            if torch.cuda.is_available():
                p = torch.cuda.get_device_properties(0)
                dev = {"type": "cuda", "name": p.name, "compute_capability": (p.major, p.minor),
                       "driver": "unknown", "memory_bytes": int(p.total_memory), "index": 0}
        if dev is not None:
            return dev
        if requested == "cuda":
            raise NoDevice("device=cuda but no CUDA GPU is visible")
    return {"type": "cpu", "name": "cpu", "compute_capability": None,
            "driver": None, "memory_bytes": None, "processor": cpu_model(),
            "threads": cpu_threads()}


def cpu_threads() -> int:
    """The CPU threads a trial measures with: the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name``; else ``platform``'s words)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _first_visible() -> int:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis and re.fullmatch(r"\d+", vis.split(",")[0].strip()):
        return int(vis.split(",")[0])
    return 0


@cache
def git_sha() -> str:
    """The repository's HEAD commit (with ``-dirty`` if the tree has changes), or ``unknown``.

    ``DESIGNZOO_GIT_SHA`` overrides it, for copies of the tree without ``.git`` (a GPU host).
    """
    if os.environ.get("DESIGNZOO_GIT_SHA"):
        return os.environ["DESIGNZOO_GIT_SHA"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict:
    """Library versions that change measured figures."""
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def triton_interpret() -> bool:
    """Whether Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``, Triton's own
    setting): kernels then run without autotuning, PDL or the folded merge, in float32, and a
    ``kernels=triton`` design is accepted on the CPU. It changes figures, so a row records it,
    a study's identity and the calibration's fingerprints carry it when set."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def environment(device: dict) -> dict:
    """The environment columns of a results row."""
    return {"device": device["name"], "driver": device.get("driver"), **versions(),
            "triton_interpret": triton_interpret(),
            "git_sha": git_sha(), "host": platform.node(),
            "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}


def slug(text: str) -> str:
    """A file-name-safe lower-case form of ``text``."""
    return re.sub(r"[^a-z0-9.-]+", "_", text.lower()).strip("_")
