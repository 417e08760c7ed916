"""``python -m sweep.cli.install``: install designzoo into this Python environment with the right
torch build for the machine, then the project itself (``pip install -e '.[dev]'``).

On a machine with an NVIDIA GPU (``nvidia-smi`` answers, or ``/dev/nvidia0`` exists) torch comes
with the project from the package index, whose Linux wheels are CUDA builds. Without one, torch's
CPU build comes first, so a bare ``torch`` requirement never pulls the several-GB CUDA build:
from PyTorch's CPU index (https://download.pytorch.org/whl/cpu), or, where that index cannot be
reached, the pinned release from the configured index (a mirror that carries the CPU build).
Without a GPU it ends by checking that no ``nvidia-*`` wheel was installed (exit 1, naming
them); everywhere, that no other distribution takes one of our import names (``kernels``:
``shadowed_imports``). Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TORCH = "2.13.0"  # the CPU build CI runs on
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu() -> bool:
    """Whether an NVIDIA GPU and its driver are visible on this machine."""
    if Path("/dev/nvidia0").exists():
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def pip(*args: str) -> int:
    """``pip install -q *args`` with this interpreter from the repository root (the command
    echoed first); its exit code."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", *args]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO).returncode


def nvidia_packages() -> list[str]:
    """The installed ``nvidia-*`` packages (CUDA wheels; ``nvidia-ml-py`` left out)."""
    out = subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"],
                         capture_output=True, text=True).stdout
    return [ln.split("==")[0] for ln in out.splitlines() if ln.lower().startswith("nvidia-")
            and not ln.lower().startswith("nvidia-ml-py")]


def shadowed_imports() -> list[str]:
    """Installed distributions whose import name is one of ours, as ``name==version``: Hugging
    Face's ``kernels`` (transformers >= 5.25 requires it) is imported as ``kernels``, our
    ``kernels/`` package, so ``import transformers``' hub-kernel integration finds ours and fails
    (``cannot import name 'CUDAProperties' from 'kernels'``), and a non-editable install of both
    writes one folder. pyproject.toml keeps transformers below 5.25."""
    from importlib import metadata

    found = []
    for name in ("kernels", "zoo", "sweep"):
        try:
            found.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return found


def main(argv: list[str] | None = None) -> int:
    """The command line (the module's text): 0 installed, 1 a pip step or the CPU check failed,
    2 outside a virtual environment."""
    import argparse

    argparse.ArgumentParser(prog="python -m sweep.cli.install",
                            description=__doc__.split("\n\n")[0].replace("``", "")).parse_args(argv)
    if sys.prefix == sys.base_prefix and not os.environ.get("DESIGNZOO_INSTALL_ANYWHERE"):
        print("sweep.cli.install: activate a virtual environment first (python3 -m venv .venv && "
              ". .venv/bin/activate), or set DESIGNZOO_INSTALL_ANYWHERE=1", file=sys.stderr)
        return 2
    gpu = has_nvidia_gpu()
    print(f"sweep.cli.install: {'an NVIDIA GPU' if gpu else 'no GPU'} on this machine", flush=True)
    pip("--upgrade", "pip")
    if not gpu:
        if pip(f"torch=={TORCH}", "--index-url", CPU_INDEX, "--timeout", "15", "--retries", "0"):
            print(f"sweep.cli.install: {CPU_INDEX} not reachable; the pinned torch {TORCH} from the "
                  "configured index", flush=True)
            if pip(f"torch=={TORCH}"):
                return 1
    if pip("-e", ".[dev]"):
        return 1
    if clash := shadowed_imports():
        print(f"sweep.cli.install: {clash} installed here: the same import name as designzoo's own "
              "package; uninstall it (pip uninstall -y NAME) or use another environment",
              file=sys.stderr)
        return 1
    if not gpu and (bad := nvidia_packages()):
        print(f"sweep.cli.install: CUDA wheels were installed on a machine without a GPU: {bad}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
