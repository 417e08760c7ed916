"""The NVML sampler: clean 'not available' without a GPU; energy and power figures with one."""

import math
import time

import pytest
import torch

from sweep.measure.nvml import NvmlSampler


def test_unavailable_gives_nan_with_reason(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *a, **k):
        if name == "pynvml":
            raise ImportError("no pynvml here")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    s = NvmlSampler()
    assert not s.available and "NVML not available" in s.reason
    with s.region("decode"):
        pass
    row = s.summary({"decode": 10})
    assert math.isnan(row["decode_j_per_token"]) and "NVML" in row["decode_j_per_token_reason"]
    for k in ("energy_j", "avg_power_w"):  # every NaN with its reason
        assert math.isnan(row[f"decode_{k}"]) and "NVML" in row[f"decode_{k}_reason"]


@pytest.mark.gpu
def test_energy_per_token_on_gpu(tmp_path):
    s = NvmlSampler(interval_s=0.01)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    with s.region("decode"):
        t0 = time.time()
        while time.time() - t0 < 1.0:
            a @ a
        torch.cuda.synchronize()
    row = s.summary({"decode": 100})
    assert 50 < row["decode_avg_power_w"] < 1000
    assert row["decode_j_per_token"] == pytest.approx(row["decode_energy_j"] / 100)
    assert len(s.samples) > 20
    s.write_csv(tmp_path / "nvml.csv")
    assert (tmp_path / "nvml.csv").read_text().startswith("t_s,power_w")


def test_sampled_power_covers_the_whole_region():
    # a board without the energy counter: its energy integrated between the first and the last
    # sample alone read a 5 ms region at a steady 500 W as 0 J (one sample), a 50 ms one as 383 W
    from sweep.measure.nvml import _sampled_energy

    one = [{"t_s": 1.0, "power_w": 500.0}]
    assert _sampled_energy(one, 0.005) == pytest.approx(2.5)  # 500 W x 5 ms
    three = [{"t_s": 1.0 + 0.02 * i, "power_w": 500.0} for i in range(3)]
    assert _sampled_energy(three, 0.05) == pytest.approx(25.0)  # 500 W, not 383 W
    ramp = [{"t_s": 0.0, "power_w": 400.0}, {"t_s": 0.02, "power_w": 600.0}]
    assert _sampled_energy(ramp, 0.1) == pytest.approx(50.0)  # the mean, 500 W, x 0.1 s
    assert math.isnan(_sampled_energy([], 0.005))
