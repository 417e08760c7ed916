"""The files of a Hugging Face safetensors checkpoint a ``weights=`` path names, found and their
headers read without torch or any tensor (``python -m sweep`` refuses a bad checkpoint before
the first trial; ``zoo.weights.read_checkpoint`` reads the tensors of the same files).
"""

from __future__ import annotations

import json
from pathlib import Path


def checkpoint_files(path: str | Path) -> list[Path]:
    """The safetensors files of the checkpoint at ``path``: a ``.safetensors`` file, a folder's
    ``model.safetensors``, or the shards its ``model.safetensors.index.json`` names (in name
    order). A file of another suffix is returned alone (``read_checkpoint`` reads it with
    ``torch.load``).

    Raises:
        FileNotFoundError: nothing at ``path``, or a folder without either file.
        ValueError: an index that is not a JSON object with a ``weight_map``, or names no shard.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if (p / "model.safetensors").exists():
        return [p / "model.safetensors"]
    index = p / "model.safetensors.index.json"
    if not index.exists():
        raise FileNotFoundError(f"no safetensors checkpoint at {p}")
    try:
        files = [p / s for s in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{index}: not a shard index (a JSON object with a weight_map): "
                         f"{e}") from None
    if not files:
        raise ValueError(f"{index}: its weight_map names no shard")
    return files


def check_checkpoint(path: str | Path) -> None:
    """Refuse a ``weights`` path that is not a readable safetensors checkpoint: each file's
    header is read (no tensor), so an empty or cut-short file or a missing shard is named before
    any work.

    Raises:
        ValueError: the path does not exist; it is neither a ``.safetensors`` file nor a folder
            holding ``model.safetensors`` or ``model.safetensors.index.json``; an index that is
            not one; a file whose safetensors header cannot be read.
    """
    p = Path(path)
    if not p.exists():
        raise ValueError(f"weights={path}: no such file or folder")
    not_one = (f"weights={path}: not a safetensors checkpoint (a .safetensors file, or a "
               "folder with model.safetensors or model.safetensors.index.json)")
    if p.is_file() and p.suffix != ".safetensors":
        raise ValueError(not_one)
    try:
        files = checkpoint_files(p)
    except FileNotFoundError:
        raise ValueError(not_one) from None
    except ValueError as e:
        raise ValueError(f"weights={path}: {e}") from None
    from safetensors import safe_open

    for f in files:
        try:  # numpy: the header read without importing torch (a second of the refusal)
            with safe_open(str(f), framework="numpy") as h:
                h.keys()
        except Exception as e:  # noqa: BLE001 - safetensors' own errors, a missing shard
            raise ValueError(f"weights={path}: {f.name} is not a readable safetensors file "
                             f"({type(e).__name__}: {e})") from None
