"""NVML sampler: power, clocks, temperature, utilization, memory and throttle reasons in a background
thread, plus the board's total-energy counter, around a measured region.

Energy per stage comes from ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load, Volta
and newer; NVML API reference) read at the start and end of the region; where the counter is
unsupported it falls back to the sampled power's mean (trapezoid rule over the samples' span)
times the region's time, and says so (NaN, with the reason, for a region with no sample in it).
Average power = energy / region time. Energy per token = stage energy / tokens produced in the stage.
On a machine without NVML (no GPU) ``available`` is False and ``reason`` says why; every figure is
then NaN with that reason, never guessed.
"""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

FIELDS = ("t_s", "power_w", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "gpu_util_pct",
          "mem_util_pct", "mem_used_bytes", "throttle_reasons")


class NvmlSampler:
    """Context manager sampling GPU ``index`` every ``interval_s`` while active.

    Usage::

        s = NvmlSampler()
        with s.region("decode"):
            ...  # synchronized GPU work
        s.energy_j["decode"], s.seconds["decode"], s.samples  # J, s, list of dicts
    """

    def __init__(self, index: int = 0, interval_s: float = 0.02):
        self.index, self.interval_s = index, interval_s
        self.samples: list[dict] = []
        self.energy_j: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.energy_source: dict[str, str] = {}
        self.available, self.reason = False, ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.available = True
        except Exception as e:  # noqa: BLE001 - no driver, no GPU, no package
            self.reason = f"NVML not available: {type(e).__name__}: {e}"
        self._stop = threading.Event()
        self._t0 = time.perf_counter()

    def _sample(self) -> dict:
        nv, h = self._nv, self._h
        util = nv.nvmlDeviceGetUtilizationRates(h)
        return {"t_s": time.perf_counter() - self._t0,
                "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                "sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "gpu_util_pct": util.gpu, "mem_util_pct": util.memory,
                "mem_used_bytes": nv.nvmlDeviceGetMemoryInfo(h).used,
                "throttle_reasons": nv.nvmlDeviceGetCurrentClocksEventReasons(h)}

    def _energy_mj(self) -> float | None:
        try:
            return float(self._nv.nvmlDeviceGetTotalEnergyConsumption(self._h))
        except Exception:  # noqa: BLE001 - not supported on this board
            return None

    def _loop(self, region: str) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(dict(self._sample(), region=region))
            except Exception:  # noqa: BLE001 - a failed read skips one sample
                pass
            self._stop.wait(self.interval_s)

    def region(self, name: str):
        """Context manager: sample and meter energy for the region ``name``."""
        return _Region(self, name)

    def write_csv(self, path: str | Path) -> None:
        """The time series, one row per sample (``FIELDS`` plus ``region``)."""
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=(*FIELDS, "region"))
            w.writeheader()
            w.writerows(self.samples)

    def summary(self, tokens: dict[str, int]) -> dict:
        """Row columns per region: ``{r}_energy_j``, ``{r}_avg_power_w``, ``{r}_j_per_token``
        (``tokens[r]`` tokens produced), ``{r}_max_temp_c``, ``{r}_sm_clock_mhz_median``, and
        ``{r}_throttled`` (any sample with a throttle reason other than idle); NaN + ``_reason``
        columns when NVML is unavailable."""
        out: dict = {}
        for r, n in tokens.items():
            if not self.available or r not in self.energy_j:
                for k in ("energy_j", "avg_power_w", "j_per_token"):
                    out[f"{r}_{k}"] = float("nan")
                    out[f"{r}_{k}_reason"] = self.reason or f"no NVML region {r!r}"
                continue
            e, t = self.energy_j[r], self.seconds[r]
            if e != e:  # NaN: a region shorter than the sampling interval, on the fallback
                for k in ("energy_j", "avg_power_w", "j_per_token"):
                    out[f"{r}_{k}_reason"] = (
                        f"no power sample in the {t * 1e3:.1f} ms region (sampled every "
                        f"{self.interval_s * 1e3:.0f} ms; this board has no energy counter)")
            out[f"{r}_energy_j"] = e
            out[f"{r}_avg_power_w"] = e / t if t > 0 else float("nan")
            out[f"{r}_j_per_token"] = e / n if n else float("nan")
            out[f"{r}_energy_source"] = self.energy_source[r]
            ss = [s for s in self.samples if s["region"] == r]
            if ss:
                clocks = sorted(s["sm_clock_mhz"] for s in ss)
                out[f"{r}_sm_clock_mhz_median"] = clocks[len(clocks) // 2]
                out[f"{r}_max_temp_c"] = max(s["temp_c"] for s in ss)
                # bit 0 is GPU idle (nvmlClocksEventReasonGpuIdle); any other bit is a throttle
                out[f"{r}_throttled"] = any(s["throttle_reasons"] & ~1 for s in ss)
        return out


class _Region:
    def __init__(self, sampler: NvmlSampler, name: str):
        self.s, self.name = sampler, name

    def __enter__(self):
        s = self.s
        if not s.available:
            return self
        s._stop.clear()
        self.e0, self.t0 = s._energy_mj(), time.perf_counter()
        self.n0 = len(s.samples)
        self.thread = threading.Thread(target=s._loop, args=(self.name,), daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        s = self.s
        if not s.available:
            return
        e1, t1 = s._energy_mj(), time.perf_counter()
        s._stop.set()
        self.thread.join()
        dt = t1 - self.t0
        s.seconds[self.name] = s.seconds.get(self.name, 0.0) + dt
        if self.e0 is not None and e1 is not None:
            e, src = (e1 - self.e0) / 1e3, "nvmlDeviceGetTotalEnergyConsumption"
        else:
            e, src = _sampled_energy(s.samples[self.n0:], dt), "sampled power x region time"
        s.energy_j[self.name] = s.energy_j.get(self.name, 0.0) + e
        s.energy_source[self.name] = src


def _sampled_energy(pts: list[dict], seconds: float) -> float:
    """Energy (J) of a region of ``seconds`` from its power samples ``pts`` (``t_s``, ``power_w``):
    their mean power (trapezoid rule over the samples' own span; one sample: its power) times the
    region's time. Integrating between the first and last sample alone left out the region's
    edges: a 5 ms region at a steady 500 W read 0 J, a 50 ms one 383 W. NaN without a sample."""
    if not pts:
        return float("nan")
    span = pts[-1]["t_s"] - pts[0]["t_s"]
    if span <= 0:
        return sum(p["power_w"] for p in pts) / len(pts) * seconds
    area = sum((b["t_s"] - a["t_s"]) * (a["power_w"] + b["power_w"]) / 2
               for a, b in zip(pts, pts[1:]))
    return area / span * seconds
