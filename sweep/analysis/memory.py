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


def usable(total_bytes: float) -> float:
    """Bytes of a device's ``total_bytes`` a run may hold: ``MEMORY_SHARE`` of it less
    ``MEMORY_RESERVE`` (the CUDA context, workspaces, graph pools; on a CPU or a unified-memory
    device, the other processes' and the OS's share)."""
    return MEMORY_SHARE * total_bytes - MEMORY_RESERVE


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
    room = usable(have)
    if need["total"] > room:
        parts = ", ".join(f"{k} {v / 1e9:.3g} GB" for k, v in need.items() if k != "total" and v)
        raise DesignError(
            f"the design needs {need['total'] / 1e9:.3g} GB ({parts}; batch {wl['batch']}, "
            f"prompt_len {wl['prompt_len']}, new_tokens {wl['new_tokens']}) and the "
            f"{device.get('name', device['type'])} has {have / 1e9:.3g} GB "
            f"({MEMORY_SHARE:.0%} less {MEMORY_RESERVE / 2**30:.0f} GiB usable: {room / 1e9:.3g} GB)")


# the copy bandwidth a read-only kernel may pass (it reads, the copy reads and writes: up to
# 1.1x measured, results/reference/attention_h100.md): the time bound below allows 1.25x
READ_OVER_COPY = 1.25


def check_time(cfg: ModelConfig, wl: dict, ceilings: dict) -> None:
    """Refuse a design whose trial cannot end within ``wl["timeout_s"]`` even at its roofline:
    ``warmup + repeats`` runs, each one prefill and ``new_tokens - 1`` decode steps, each stage at
    least its minimum bytes over ``READ_OVER_COPY`` x the measured copy bandwidth
    (``copy_bytes_s``, bytes/s) and its matmul FLOPs over the measured GEMM rate of its dtype
    (``gemm_flops_<dtype>``, FLOP/s; the term left out where not measured): a lower bound, so a
    design refused here would only have run into its timeout (a full-size model on a CPU: an
    8B at batch 8, 15 minutes, 2026-11-28). Nothing is refused without a measured copy rate.

    Raises:
        DesignError: naming the bound (s), its parts and ``workload.timeout_s``.
    """
    from zoo import counts

    copy = ceilings.get("copy_bytes_s")
    if not copy:
        return
    peak = ceilings.get(f"gemm_flops_{cfg.dtype}")
    B, T, N = wl["batch"], wl["prompt_len"], wl["new_tokens"]

    def floor(st) -> float:  # s
        return max(st.min_bytes / (READ_OVER_COPY * copy), st.matmul_flops / peak if peak else 0.0)

    runs = wl.get("warmup", 0) + wl.get("repeats", 1)
    prefill = floor(counts.prefill(cfg, B, T, wl.get("routing_skew", 0.0)))
    decode = (N - 1) * floor(counts.decode_mean(cfg, B, T, N, wl.get("routing_skew", 0.0)))
    need, limit = runs * (prefill + decode), wl.get("timeout_s", 900.0)
    if need > limit:
        raise DesignError(
            f"the trial needs at least {need:.0f} s at its roofline ({runs} runs of a "
            f"{prefill:.1f} s prefill and {N - 1} decode steps of {decode / max(N - 1, 1):.3f} s at "
            f"the measured {copy / 1e9:.1f} GB/s" + (f" and {peak / 1e12:.2f} TFLOP/s" if peak else "")
            + f"), over workload.timeout_s={limit:g}: lower workload.repeats, workload.new_tokens, "
            "workload.batch or workload.prompt_len, or raise workload.timeout_s")
