"""Does a design fit its device: the analytic memory a run holds (``zoo.counts.memory_need``)
against the device's memory, with a stated margin. A design that cannot fit is refused before
any work (``sweep.plan``) or pruned before its trial starts (``sweep.objective``).
"""

from __future__ import annotations

from pathlib import Path

from zoo import DesignError, ModelConfig

# what a run may hold of its device: the rest is the CUDA context, cuBLAS workspaces, CUDA-graph
# pools and the allocator's slack (on the CPU: the other processes' memory)
MEMORY_SHARE, MEMORY_RESERVE = 0.9, 1 << 30


def device_memory(device: dict) -> int | None:
    """Bytes the device has for a run: a GPU's total memory, the CPU's available memory
    (``MemAvailable`` of ``/proc/meminfo``); None where unknown."""
    if device.get("memory_bytes"):
        return int(device["memory_bytes"])
    if device.get("type") == "cpu":
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def check_fits(cfg: ModelConfig, wl: dict, device: dict) -> None:
    """Refuse a design whose run cannot fit the device's memory (``zoo.counts.memory_need``:
    weights, KV cache, prefill activations; the CPU's attention scores too) within
    ``MEMORY_SHARE`` of it less ``MEMORY_RESERVE``.

    Raises:
        DesignError: naming the bytes needed, by part, and the bytes there are.
    """
    from zoo import counts

    have = device_memory(device)
    if have is None:
        return
    need = counts.memory_need(cfg, wl["batch"], wl["prompt_len"], wl["new_tokens"],
                              scores=device["type"] == "cpu")
    room = MEMORY_SHARE * have - MEMORY_RESERVE
    if need["total"] > room:
        parts = ", ".join(f"{k} {v / 1e9:.3g} GB" for k, v in need.items() if k != "total" and v)
        raise DesignError(
            f"the design needs {need['total'] / 1e9:.3g} GB ({parts}; batch {wl['batch']}, "
            f"prompt_len {wl['prompt_len']}, new_tokens {wl['new_tokens']}) and the "
            f"{device.get('name', device['type'])} has {have / 1e9:.3g} GB "
            f"({MEMORY_SHARE:.0%} less {MEMORY_RESERVE / 2**30:.0f} GiB usable: {room / 1e9:.3g} GB)")
