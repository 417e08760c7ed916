"""The performance model on the CPU: calibration micro-benchmarks, the predictor's two kinds per
module, the transfer to another device, and the predicted columns on every results row."""

import math
from pathlib import Path

import numpy as np
import pytest

from sweep.analysis import anchors, power, price_attention, pricing
from sweep.analysis import calibration_store as store
from sweep.analysis import predict as perf
from sweep.analysis.hardware import load_spec
from sweep.caches import calibration as cal
from sweep.common.env import detect_device
from sweep.space import shipped_designs
from tests.helpers import run_tiny
from zoo import ModelConfig

TINY = ModelConfig.from_name("tiny")
REF = Path(__file__).resolve().parent.parent / "results/reference"
WL = {"batch": 2, "prompt_len": 64, "new_tokens": 16}


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    """A quick CPU calibration over the tiny shipped designs, in a folder of its own."""
    mp = pytest.MonkeyPatch()
    mp.setattr(cal, "CAL_DIR", tmp_path_factory.mktemp("cal"))
    got = cal.calibrate(detect_device("cpu"), shipped_designs(cpu=True), refresh=True,
                        quick=True, ceilings={"copy_bytes_s": 2e10, "gemm_flops_fp32": 1e11})
    mp.undo()
    return got


def test_calibration_covers_the_kernels_the_zoo_launches(calibration):
    meta, table = calibration.meta, calibration.table
    assert {"gemm", "decode_attn", "prefill_attn", "elementwise", "launch"} <= set(table.kind)
    for k in ("device", "driver", "torch", "triton", "date", "version", "ceilings"):
        assert k in meta, k
    g = table[table.kind == "gemm"]
    assert (g.time_s > 0).all() and (g.time_s_min <= g.time_s).all()
    n_in = 2 * TINY.ffn_dim
    assert ((g.N == n_in) & (g.K == TINY.d_model)).any()  # the FFN gate+up GEMM of tiny
    assert sorted(g.M.unique())[:3] == [1, 2, 4]
    assert {"rmsnorm", "rope", "swiglu", "kv_write"} <= set(table[table.kind == "elementwise"].op)


def test_prediction_per_module_in_two_kinds(calibration):
    c = pricing.Calibrated(calibration)
    row = perf.predict(TINY, WL, load_spec("cpu"), c, mode="eager",
                       ceilings=calibration.meta["ceilings"])
    for st in ("prefill", "decode"):
        mods = sum(row[f"{st}_pred_ms_{m}"] for m in perf.MODULES)
        assert row[f"{st}_pred_ms_calibrated"] == pytest.approx(mods)
        assert row[f"{st}_pred_ms_roofline"] > 0 and row[f"{st}_pred_ms_calibrated"] > 0
        assert f"{st}_pred_basis" in row and "gemm N=" in row[f"{st}_pred_basis"]
    assert row["prediction_basis"].startswith("calibrated on cpu")
    assert row["prediction_notes"] == ""  # tiny is inside the calibrated range


def test_outside_the_calibrated_range_says_so(calibration):
    c = pricing.Calibrated(calibration)
    big = TINY.replace(d_model=1000, n_heads=10, n_kv_heads=5, head_dim=100, ffn_dim=2730)
    row = perf.predict(big, dict(WL, batch=16, prompt_len=200), load_spec("cpu"), c,
                       mode="eager", ceilings=calibration.meta["ceilings"])
    notes = row["prediction_notes"]
    assert "not calibrated: scaled from" in notes and "outside the calibrated" in notes
    assert math.isfinite(row["decode_pred_ms_calibrated"])


def test_roofline_of_a_real_shape_is_weight_bytes_over_bandwidth():
    cfg = ModelConfig.from_name("llama3_1_8b")
    h100 = load_spec("h100_sxm")
    row = perf.predict(cfg, {"batch": 1, "prompt_len": 512, "new_tokens": 128}, h100)
    from zoo import counts

    floor = counts.decode_mean(cfg, 1, 512, 128).min_bytes / h100.peak_bytes_s
    assert row["decode_pred_ms_roofline"] == pytest.approx(1e3 * floor, rel=0.05)
    assert row["prediction_basis"] == "roofline only (h100_sxm peaks)"
    assert math.isnan(row["decode_pred_ms_calibrated"])


@pytest.fixture
def doubled_bandwidth(calibration):
    """``(calibrated, transferred)``: the CPU calibration, and it priced for a device with twice
    the copy bandwidth and the same GEMM ceiling."""
    c = pricing.Calibrated(calibration)
    src = calibration.meta["ceilings"]
    return c, anchors.transfer(c, src, {"copy_bytes_s": 2 * src["copy_bytes_s"],
                                     "gemm_flops_fp32": src["gemm_flops_fp32"]}, "fp32")


def test_transfer_scales_by_the_ceilings(calibration, doubled_bandwidth):
    c, fast = doubled_bandwidth
    src = calibration.meta["ceilings"]
    k = next(k for k in perf.kernel_list(TINY, 2, 1, 65, "torch") if k.op == "rope")
    t0, _ = c.price(k)
    t1, _ = fast.price(k)
    fixed = c._linear("elementwise", {"op": "rope", "impl": "torch"})[0]
    assert t1 == pytest.approx(fixed + (t0 - fixed) / 2)  # bandwidth x2: the per-byte part halves
    assert "transferred" in perf.predict(TINY, WL, load_spec("cpu"), fast, mode="eager",
                                         ceilings=src)["prediction_basis"]


def test_transfer_by_anchors_uses_the_entries_timed_there():
    """``sweep.analysis.anchors``: GEMM anchors 1.0x their table times give compute factor 1.0
    whatever the ceilings say; GEMV anchors at ``fixed + (t - fixed) x 0.75`` give memory factor
    0.75; the prediction's basis says the transfer rests on them. The sample takes
    compute-bound GEMMs and one- and eight-row GEMVs of the table."""
    import pandas as pd

    from sweep.analysis import anchors

    rows = [{"kind": "gemm", "M": 4096.0 * m, "N": 2048.0 * n, "K": 2048.0, "dtype": "bf16",
             "time_s": 1e-4 * m * n} for m in (1, 2) for n in (1, 2, 3)]
    rows += [{"kind": "gemv", "M": float(m), "N": 1024.0 * n, "K": 1024.0, "prologue": "none",
              "dtype": "bf16", "bytes": 2e6 * n, "time_s": 2e-6 + 1e-6 * n}
             for m in (1, 8, 16) for n in (1, 2, 4, 8)]
    table = pd.DataFrame(rows)
    gemm, gemv = anchors.sample(table)
    assert gemm and all(g[0] >= 4096 for g in gemm)
    assert gemv and {v[0] for v in gemv} <= {1, 8} and all(v[3] == "none" for v in gemv)
    c = pricing.Calibrated(store.Calibration({"device": "A", "ceilings": {}}, table))
    fixed = c._fixed("gemv", "bf16")
    here = [dict(r, time_s=r["time_s"]) for r in rows if r["kind"] == "gemm"]
    here += [dict(r, time_s=min(fixed, r["time_s"]) + (r["time_s"] - min(fixed, r["time_s"]))
                  * 0.75) for r in rows if r["kind"] == "gemv"]
    src = {"gemm_flops_bf16": 8e14, "copy_bytes_s": 3e12}
    dst = {"gemm_flops_bf16": 7.4e14, "copy_bytes_s": 4.2e12, "device": "B"}
    by_ceil = anchors.transfer(c, src, dst, "bf16")
    assert by_ceil.scale["compute"] == pytest.approx(8 / 7.4)
    t = anchors.transfer(c, src, dst, "bf16", anchors=here)
    assert t.scale["compute"] == pytest.approx(1.0) and t.scale["memory"] == pytest.approx(0.75)
    assert "entries of the source table timed here" in t.meta["transfer"]["basis"]


def test_a_gemv_scaled_from_its_nearest_shape_keeps_the_latency():
    """A decode GEMV of an uncalibrated (N, K) is priced from the nearest calibrated shape with
    only its bytes part scaled by the weights: the fitted latency (``_fixed``) is not halved
    with the bytes (a 2-layer, 256-wide development design was priced 33% fast when it was)."""
    import pandas as pd

    rows = [{"kind": "gemv", "M": 1.0, "N": 1024.0 * n, "K": 1024.0, "prologue": "none",
             "dtype": "bf16", "time_s": 3e-6 + 1e-6 * n} for n in (1, 2, 4, 8)]
    c = pricing.Calibrated(store.Calibration({"device": "A"}, pd.DataFrame(rows)))
    fixed = c._fixed("gemv", "bf16")
    assert fixed == pytest.approx(3e-6, rel=0.05)
    t, basis = c.gemv({"M": 1, "N": 512, "K": 1024, "prologue": "none", "dtype": "bf16"})
    assert "nearest" in basis
    assert t == pytest.approx(fixed + (4e-6 - fixed) / 2, rel=1e-6)  # not 4 us / 2


def test_designs_priced_from_one_calibration_share_its_selections_and_price_alike():
    """Every ``Calibrated`` of one calibration reads the same selections of its table (kept on
    the ``Calibration``): a second design's kernels are priced from them exactly as a fresh
    calibration's; a table replaced on the pricer (the advisor adds its rows) is selected from
    itself, not from the calibration's kept selections."""
    import pandas as pd

    spec = load_spec("h100_sxm")
    shipped = store.shipped_for(spec)
    design = ModelConfig.from_name("llama3_2_1b").replace(kernels="triton", kv_dtype="int8")
    wl = {"batch": 8, "prompt_len": 4096, "new_tokens": 64}
    first = perf.predict(design, wl, spec, calibration=pricing.Calibrated(shipped))
    assert shipped.selections  # kept with the calibration
    again = perf.predict(design, wl, spec, calibration=pricing.Calibrated(shipped))
    fresh = perf.predict(design, wl, spec, calibration=pricing.Calibrated(
        store.Calibration(shipped.meta, shipped.table)))
    assert first == again == fresh
    c = pricing.Calibrated(shipped)
    rows = [{"kind": "launch", "op": "only_here", "time_s": 7e-6}]
    c.t = pd.concat([c.t, pd.DataFrame(rows)], ignore_index=True)
    c._fits.clear()
    assert c.launch("only_here") == 7e-6
    with pytest.raises(KeyError, match="only_here"):
        pricing.Calibrated(shipped).launch("only_here")


def test_prefill_attention_takes_a_group_measured_at_its_length():
    """A GQA group calibrated only at other lengths (G=2: 4 heads at T=256, slow for want of
    parallelism, and T=4096) does not price a T=512 prefill of 32 heads when another group was
    measured at T=512: that one's efficiency does (the offline repricing of the H100 and H200
    records priced such a design's TTFT +48% and +50% slow)."""
    import pandas as pd

    def e(G, T, BH, tflops):
        flops = 2 * BH * 64 * T * T
        return {"kind": "prefill_attn", "impl": "triton", "G": float(G), "D": 64.0, "T": float(T),
                "BH": float(BH), "flops": float(flops), "time_s": flops / (tflops * 1e12)}

    c = pricing.Calibrated(store.Calibration({"device": "A"}, pd.DataFrame(
        [e(2, 256, 4, 4), e(2, 4096, 128, 440), e(4, 512, 32, 100), e(4, 4096, 128, 440)])))
    flops = 2 * 32 * 64 * 512 * 512
    t, basis = c.prefill_attn({"impl": "triton", "D": 64, "G": 2, "T": 512, "B": 1, "H": 32}, flops)
    assert "G=4" in basis
    assert t == pytest.approx(flops / 100e12, rel=1e-6)


@pytest.mark.slow
def test_every_row_has_the_predicted_columns(measured_study):
    _, _, df = measured_study
    for st in ("prefill", "decode"):
        for col in ([f"{st}_pred_ms_roofline", f"{st}_pred_ms_calibrated", f"{st}_pred_error_pct",
                     f"{st}_pred_error_pct_roofline"] + [f"{st}_pred_ms_{m}" for m in perf.MODULES]):
            assert col in df.columns and df[col].notna().all(), col
    assert df.prediction_basis.str.startswith("calibrated on cpu").all()
    # the signed error is calibrated vs measured
    r = df.iloc[0]
    assert r.decode_pred_error_pct == pytest.approx(
        100 * (r.decode_pred_ms_calibrated - r.decode_tpot_ms) / r.decode_tpot_ms)


def test_decode_attention_priced_by_kv_bytes_and_scores(calibration):
    c = pricing.Calibrated(calibration)
    k = next(k for k in perf.kernel_list(TINY, 2, 1, 65, "torch") if k.kind == "decode_attn")
    t, basis = c.price(k)
    assert t > 0 and "fit on KV bytes and scores" in basis
    # more query heads per KV head: same KV bytes, more scores; never cheaper
    wide = dict(k.shape, G=k.shape["G"] * 4)
    t4, _ = c.decode_attn(wide, k.bytes)
    assert t4 >= t * 0.999
    # a group size the grid does not hold is said in the notes
    c.notes = []
    c.decode_attn(dict(k.shape, G=64), k.bytes)
    assert any("outside the calibrated" in n and "group 64" in n for n in c.notes)


def test_decode_attention_price_is_monotone_in_group_and_continuous_in_length(calibration):
    """The residual correction may not reorder designs (a larger GQA group at the same cache
    never cheaper: structural, so on the live calibration) nor jump where the nearest calibrated
    shape changes (a longer context never much cheaper: the old nearest-shape correction stepped
    by the ratios' spread there; checked on the committed CPU calibration of ``predict_cpu``,
    since a live one's ratios carry this machine's noise)."""
    from sweep.analysis import calibration_store as store

    c = pricing.Calibrated(calibration)
    k = next(k for k in perf.kernel_list(TINY, 2, 1, 65, "torch") if k.kind == "decode_attn")
    by_group = [c.decode_attn(dict(k.shape, G=g), k.bytes)[0] for g in range(1, 33)]
    assert all(b >= a for a, b in zip(by_group, by_group[1:])), by_group
    fixed = pricing.Calibrated(store.load("", where=REF / "predict_cpu/calibration_cpu.json"))
    per_pos = k.bytes / k.shape["S"]
    by_len = [fixed.decode_attn(dict(k.shape, S=s), per_pos * s)[0] for s in range(16, 1024, 4)]
    steps = [b / a - 1 for a, b in zip(by_len, by_len[1:])]
    assert min(steps) > -0.002, min(steps)  # at most 0.2% cheaper per 4 more positions
    # at a calibrated shape the corrected fit is its measurement, and the price no lower
    cal = calibration.table
    for _, row in cal[cal.kind == "decode_attn"].iterrows():
        shape = {"impl": row.impl, "kv_dtype": row.kv_dtype, "ring": int(row.get("ring", 0)),
                 **{d: int(row[d]) for d in ("B", "Hkv", "G", "S", "D")}}
        t, _ = c.decode_attn(shape, row.bytes)
        fit = price_attention.attn_fit(c, (row.impl, row.kv_dtype))
        own, _ = price_attention.attn_points(c, fit, shape, row.bytes, np.array([shape["G"]]))
        assert own[0] == pytest.approx(row.time_s, rel=1e-9) and t >= row.time_s * (1 - 1e-9)


@pytest.mark.parametrize("impl,kv", [("torch", "bf16"), ("triton", "bf16"), ("triton", "int8"),
                                     ("triton", "fp8_e4m3")])
def test_decode_attention_price_on_the_h100_calibration_has_no_steps(impl, kv):
    """On the committed H100 calibration (v7): context 256 .. 16k at batch 8, 8 KV heads, group
    4, head_dim 128 never gets cheaper by more than 0.5% per 64 positions (the nearest-shape
    correction dropped 2.2% in one step there), and groups 1 .. 32 never get cheaper."""
    from sweep.analysis import calibration_store as store

    c = pricing.Calibrated(store.load("", where=REF / "calibration_h100.json"))
    per_pos = 2 * 8 * 8 * 128 * (2 if kv == "bf16" else 1)
    sh = dict(impl=impl, kv_dtype=kv, B=8, Hkv=8, G=4, S=512, D=128)
    ts = [c.decode_attn(dict(sh, S=s), per_pos * s)[0] for s in range(256, 16384, 64)]
    assert min(b / a - 1 for a, b in zip(ts, ts[1:])) > -0.005
    gs = [c.decode_attn(dict(sh, G=g), per_pos * 512)[0] for g in range(1, 33)]
    assert all(b >= a for a, b in zip(gs, gs[1:]))


def test_compile_mode_decode_is_not_guessed(calibration):
    c = pricing.Calibrated(calibration)
    row = perf.predict(TINY, WL, load_spec("cpu"), c, mode="compile",
                       ceilings=calibration.meta["ceilings"])
    assert math.isnan(row["decode_pred_ms_calibrated"])
    assert "Inductor" in row["decode_pred_reason"]
    assert math.isfinite(row["prefill_pred_ms_calibrated"])  # prefill runs eagerly
    # the row's figure is NaN too, not the roofline standing in for it (a predicted front once
    # ranked torch x compile first at its roofline's 1343 tok/s); the roofline keeps its column
    assert math.isnan(row["decode_pred_ms"]) and math.isfinite(row["decode_pred_ms_roofline"])


def test_transfer_keeps_a_skinny_gemms_latency(doubled_bandwidth):
    c, fast = doubled_bandwidth
    k = next(k for k in perf.kernel_list(TINY, 1, 1, 65, "torch") if k.op == "w13")
    t0, _ = c.price(k)
    t1, _ = fast.price(k)
    fixed = c._gemm_fixed("fp32")
    assert 0 <= fixed <= t0
    assert t1 == pytest.approx(min(fixed, t0) + (t0 - min(fixed, t0)) / 2)


def test_module_attribution_covers_every_module_on_the_cpu():
    import torch

    from sweep.measure.modules import MODULES, module_windows
    from zoo import Transformer
    from zoo.generate import Generator

    m = Transformer.build(TINY, "cpu")
    gen = Generator(m, 2, 80, "eager")
    prompt = torch.randint(0, TINY.vocab_size, (2, 64))
    out = module_windows(gen, prompt, {"device": "cpu"})
    for st in ("prefill", "decode"):
        for mod in MODULES:
            assert out[f"{st}_meas_ms_{mod}"] > 0, (st, mod)
        assert out[f"{st}_meas_unattributed_ms"] == 0
        assert out[f"{st}_meas_kernel_ms"] == pytest.approx(
            sum(out[f"{st}_meas_ms_{mod}"] for mod in MODULES))


def test_module_of_follows_the_innermost_range():
    from sweep.measure.modules import module_of

    assert module_of(["decode", "layer0", "attn", "qkv"], "nvjet_tst_128x64") == "qkv"
    assert module_of(["decode", "layer0", "attn", "out_proj"], "copy_kernel") == \
        "norms_elementwise"  # the layout copy beside the GEMM
    assert module_of(["decode", "layer3", "ffn", "w2"], "aten::mm") == "ffn"
    assert module_of(["decode", "layer3", "attn"], "vectorized_elementwise_add") == \
        "norms_elementwise"  # the residual add
    assert module_of(["decode", "layer3", "attn", "attention"], "softmax_warp_forward") == \
        "attention"
    assert module_of([], "embedding") == "norms_elementwise"
    # the Triton decode GEMV is the GEMM of its range (an H100 step put every one of them in
    # norms_elementwise)
    assert module_of(["decode", "layer0", "attn", "qkv"], "_gemv_kernel") == "qkv"
    # the MoE layer's grouped GEMMs are its GEMMs; its slots' sum is elementwise
    assert module_of(["decode", "layer2", "ffn", "experts"], "_moe_up_kernel") == "ffn"
    assert module_of(["decode", "layer2", "ffn", "experts"], "_moe_down_kernel") == "ffn"
    assert module_of(["decode", "layer2", "ffn", "experts"],
                     "void at::native::reduce_kernel<128, 4>") == "norms_elementwise"
    assert module_of(["decode", "layer0", "ffn", "w13"], "_gemv_kernel") == "ffn"


def test_the_ranges_gpu_marks_are_not_kernels():
    """torch.profiler puts each record_function range on the GPU timeline too (a CUDA event
    named like the range): it is neither a kernel of the sequence nor unattributed time (an H100
    decode step counted 165 "kernels" for its 85, and matched half of them to the replay)."""
    from types import SimpleNamespace as NS

    from torch.autograd import DeviceType

    from sweep.measure.modules import attribute

    def ev(name, dev, start, end, id_, thread=1):
        return NS(name=name, device_type=dev, time_range=NS(start=start, end=end), id=id_,
                  thread=thread, linked_correlation_id=0)

    cpu, gpu = DeviceType.CPU, DeviceType.CUDA
    evs = [ev("decode", cpu, 0, 100, 10), ev("qkv", cpu, 1, 20, 11),
           ev("cudaLaunchKernel", cpu, 2, 3, 1), ev("_gemv_kernel", gpu, 30, 36, 1),
           ev("qkv", gpu, 30, 36, 11), ev("w2", cpu, 40, 60, 12),
           ev("cudaLaunchKernel", cpu, 41, 42, 2), ev("_gemv_kernel", gpu, 61, 65, 2)]
    us, seq = attribute(NS(events=lambda: evs), cuda=True)
    assert [k for k, _, _ in seq] == ["_gemv_kernel", "_gemv_kernel"]
    assert us["qkv"] == 6 and us["ffn"] == 4 and us["unattributed"] == 0


def test_graph_replay_aligned_to_the_eager_run():
    from sweep.measure.modules import align_replay

    seq = [("gemm_a", "qkv", 5.0), ("rope", "norms_elementwise", 1.0),
           ("flash", "attention", 4.0), ("gemm_b", "out_proj", 3.0), ("add", "norms_elementwise", 1.0)]
    eager = {"qkv": 5.0, "attention": 4.0, "out_proj": 3.0, "norms_elementwise": 2.0}
    # the whole sequence inside the replay (a token copy before, a clone after)
    us, note = align_replay(seq, [("copy", 9), ("gemm_a", 6), ("rope", 2), ("flash", 7),
                                  ("gemm_b", 8), ("add", 1), ("clone", 9)], eager)
    assert note == "" and us == {"qkv": 6, "attention": 7, "out_proj": 8, "norms_elementwise": 3}
    # under capture a library picked another GEMM variant, and one extra kernel came along
    us, note = align_replay(seq, [("copy", 9), ("gemm_a", 6), ("rope", 2), ("flash", 7),
                                  ("gemm_b_v2", 8), ("splitk_reduce", 2), ("add", 1)], eager)
    assert us == {"qkv": 6, "attention": 7, "out_proj": 8 + 2, "norms_elementwise": 2 + 1}
    assert "4 of 5 kernels matched by name" in note
    assert "gemm_b -> gemm_b_v2" in note
    assert sum(us.values()) == 26  # every graph kernel counted once, the copy before left out
    # nothing alike: the eager durations, flagged
    us, note = align_replay(seq, [("x", 1), ("y", 2)], eager)
    assert note is None and us is eager


@pytest.mark.slow
def test_profiled_rows_compare_module_shares(tmp_path):
    from sweep.analysis.module_shares import module_check

    _, _, df = run_tiny(tmp_path, "profile=modules", "study.n_trials=1")
    r = df.iloc[0].to_dict()
    for st in ("prefill", "decode"):
        meas = sum(r[f"{st}_meas_share_{m}"] for m in perf.MODULES)
        pred = sum(r[f"{st}_pred_share_{m}"] for m in perf.MODULES)
        assert meas == pytest.approx(1.0) and pred == pytest.approx(1.0)
        errs = [abs(r[f"{st}_share_err_pts_{m}"]) for m in perf.MODULES]
        assert r[f"{st}_share_err_pts_max"] == pytest.approx(max(errs))
    # a row without calibrated predictions says why instead of comparing
    bad = dict(r, decode_pred_ms_calibrated=math.nan)
    assert "decode_share_reason" in module_check(bad)


def test_decode_gemv_path_prices_the_fused_kernels():
    """A Triton decode step of <= 16 sequences runs the norms and SwiGLU in the GEMVs' prologues
    and RoPE with the cache write inside decode attention (``Block.skinny``, the default): no
    norm, SwiGLU or RoPE kernel, one decode-attention launch per layer, its linear layers priced
    as decode GEMVs with their prologues; unfolded (``switches.rope_in_attention=false``) one
    RoPE + cache-write launch before it; 17 sequences take the norm kernels and GEMMs again."""
    ops = [k.op for k in perf.kernel_list(TINY, 16, 1, 65, "triton")]
    assert "rmsnorm" not in ops and "swiglu" not in ops and "kv_write" not in ops
    ks = perf.kernel_list(TINY, 16, 1, 65, "triton")
    assert [k.launches for k in ks if k.op in ("rope", "decode_attention")] == [1]
    assert {k.shape["prologue"] for k in ks if k.kind == "gemv"} == {"norm+res", "none", "swiglu"}
    assert not [k for k in ks if k.kind == "gemm"]
    ks = perf.kernel_list(TINY, 16, 1, 65, "triton", fold=False)
    assert [k.launches for k in ks if k.op in ("rope", "decode_attention")] == [1, 1]
    ks17 = perf.kernel_list(TINY, 17, 1, 65, "triton")
    assert "rmsnorm" in [k.op for k in ks17] and not [k for k in ks17 if k.kind == "gemv"]
    gelu = TINY.replace(ffn_type="gelu")  # its activation still runs as a kernel of its own
    assert "swiglu" in [k.op for k in perf.kernel_list(gelu, 16, 1, 65, "triton")]
    torch_ops = [k.op for k in perf.kernel_list(TINY, 2, 1, 65, "torch")]
    assert "kv_write" in torch_ops and "rmsnorm" in torch_ops


def test_a_large_prefill_is_priced_eager():
    """``zoo.generate`` graphs a prefill of at most PREFILL_GRAPH_MAX_TOKENS tokens (a larger one's
    graph pool would hold every activation); the model prices the same stages as graphed."""
    from zoo.generate import PREFILL_GRAPH_MAX_TOKENS as MAX

    assert perf.graphed("cudagraph", 1, 1) and perf.graphed("compile", 64, 1)
    assert perf.graphed("cudagraph", 8, MAX // 8) and not perf.graphed("cudagraph", 8, MAX // 8 + 1)
    assert not perf.graphed("compile", 1, 512) and not perf.graphed("eager", 1, 1)
    assert not perf.graphed("compile", 1, 1, prefill=True)  # a one-token prompt's prefill


def test_kernel_list_follows_the_rope_fold():
    """With RoPE and the cache write folded into decode attention the decode step has one kernel
    per layer fewer; the prefill keeps its RoPE + cache-write kernel."""
    def ops(new, ctx, fold):
        return [k.op for k in perf.kernel_list(TINY, 1, new, ctx, "triton", fold)]

    assert "rope" in ops(1, 65, False) and "rope" in ops(64, 64, False)
    assert "rope" not in ops(1, 65, True) and "rope" in ops(64, 64, True)
    assert "decode_attention" in ops(1, 65, True)


def test_sustained_gemm_profile_finds_the_slow_down_and_its_onset():
    """``sweep.measure.ceilings.sustained_profile`` on call times that slow from 1.2 to 1.35 ms
    after 80 calls (96 ms of load): the rate of the second half, and the onset near 96 ms; no
    slow-down: the burst rate and the whole run as the onset."""
    from sweep.measure.ceilings import sustained_profile

    flop = 2 * 8192**3
    p = sustained_profile([1.2e-3] * 80 + [1.35e-3] * 1000, flop, flop / 1.2e-3)
    assert p["gemm_flops_bf16_sustained"] == pytest.approx(flop / 1.35e-3)
    assert 0.09 <= p["power_onset_s"] <= 0.105
    flat = sustained_profile([1.2e-3] * 100, flop, flop / 1.2e-3)
    assert flat["gemm_flops_bf16_sustained"] == pytest.approx(flop / 1.2e-3)
    assert flat["power_onset_s"] == pytest.approx(0.12)


def test_the_sustained_rate_and_onset_are_medians_over_runs():
    """``sweep.measure.ceilings.median_profile``: three sustained runs (one slowing early and
    hard, as single runs on one H100 did) give the median rate and the median onset, not the
    outlier's; the rate's spread spans the runs."""
    from sweep.measure.ceilings import median_profile, sustained_profile

    flop = 2 * 8192**3
    runs = [sustained_profile([1.2e-3] * n + [t] * 1000, flop, flop / 1.2e-3)
            for n, t in ((30, 1.40e-3), (80, 1.30e-3), (120, 1.28e-3))]
    m = median_profile(runs)
    assert m["gemm_flops_bf16_sustained"] == pytest.approx(flop / 1.30e-3)
    assert 0.09 <= m["power_onset_s"] <= 0.105
    lo, hi = m["gemm_flops_bf16_sustained_spread"]
    assert lo <= flop / 1.40e-3 * 1.0001 and hi >= flop / 1.28e-3 * 0.9999


def test_a_ceiling_is_the_median_of_its_readings():
    """``sweep.measure.ceilings``: a burst rate is the median of its short readings' medians
    (one low reading does not move it), the spread spans every call, each reading is kept."""
    from sweep.measure import ceilings

    reads = [[1.0e-3] * 5, [1.02e-3] * 5, [1.2e-3] * 5, [1.01e-3] * 5, [0.99e-3] * 5]
    r = ceilings._rate("gemm_flops_bf16", 1e12, reads)
    assert r["gemm_flops_bf16"] == pytest.approx(1e12 / 1.01e-3)  # the median reading
    assert r["gemm_flops_bf16_spread"] == pytest.approx([1e12 / 1.2e-3, 1e12 / 0.99e-3])
    assert len(r["gemm_flops_bf16_readings"]) == 5

    class T:
        calls = 0

        def repeat(self, fn, warmup, repeats):
            T.calls += 1
            return [1e-3] * repeats

    got = ceilings._readings(T(), None, 3, 2, 4)
    assert T.calls == 3 and [len(x) for x in got] == [4, 4, 4]


def test_power_limit_slows_a_long_stages_compute_bound_kernels_only():
    """On the shipped H100 calibration: with a measured sustained GEMM 1.11x slower past 75 ms,
    the 1B shape's 4096-token batch-8 prefill (~117 ms, its repeats back to back) is priced
    slower by the compute-bound kernels' share times 0.11 and says so in its basis; a 512-token
    prefill (~2.4 ms, 5 runs well under the onset) and the memory-bound decode step are
    unchanged; without the sustained figures (a CPU, an older cache) nothing changes."""
    import json

    c = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    ceil = json.loads((REF / "heldout_h100/ceilings.json").read_text())
    hot = dict(ceil, gemm_flops_bf16_sustained=ceil["gemm_flops_bf16"] / 1.11, power_onset_s=0.075)
    hw = load_spec("h100_sxm")
    cfg = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    assert power.power_limit(ceil) is None
    profile, onset = power.power_limit(hot)  # no duties measured: the GEMM's at every duty
    assert onset == pytest.approx(0.075) and [power.slowdown_at(profile, d)
                                              for d in (0.0, 0.5, 1.0)] == pytest.approx([1.11] * 3)
    for B, T, slower in [(8, 4096, True), (1, 512, False)]:
        wl = dict(batch=B, prompt_len=T, new_tokens=64, warmup=2, repeats=5)
        cold, warm = perf.predict(cfg, wl, hw, c, ceilings=ceil), perf.predict(cfg, wl, hw, c,
                                                                               ceilings=hot)
        assert warm["decode_pred_ms"] == pytest.approx(cold["decode_pred_ms"], rel=1e-9)
        if not slower:
            assert warm["prefill_pred_ms"] == pytest.approx(cold["prefill_pred_ms"], rel=1e-9)
            continue
        ratio = warm["prefill_pred_ms"] / cold["prefill_pred_ms"]
        assert 1.05 < ratio < 1.11  # the compute-bound share (most, not all) slowed by 11%
        assert "power_limit" in warm["prefill_pred_basis"]
        assert warm["prefill_pred_ms_attention"] > cold["prefill_pred_ms_attention"]
        assert warm["prefill_pred_ms_norms_elementwise"] == pytest.approx(
            cold["prefill_pred_ms_norms_elementwise"], rel=1e-9)
    assert power.sustained_fraction(0.1, 0.0, 0.075) == pytest.approx(0.25)
    assert power.sustained_fraction(0.01, 0.02, 0.075) == 0.0
    assert power.sustained_fraction(0.05, 0.3, 0.075) == 1.0


def test_a_stage_slows_at_the_power_limits_slow_down_of_its_own_duty():
    """With the GEMM's slow-down measured between copies (``power_slowdown_by_duty``, the H100's
    of 2026-12-06: 1.02 at duty 0.49, 1.10 at 0.72, 1.11 at 1), ``slowdown_at`` interpolates
    between the points (1 at duty 0); a stage's duty is its compute-bound FLOPs at the measured
    GEMM ceiling over its time: the 1B shape's long prefill (cuBLAS GEMMs near the ceiling, duty
    ~0.8) slows about as with the GEMM's full ratio, an OLMoE-1B-7B prefill (Triton grouped GEMMs
    at about half the ceiling, duty ~0.5) a third as much or less, and each basis says its duty; a
    slow-down that is not a number is left out of the profile."""
    import json

    c = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    ceil = json.loads((REF / "heldout_h100/ceilings.json").read_text())
    flat = dict(ceil, gemm_flops_bf16_sustained=ceil["gemm_flops_bf16"] / 1.11, power_onset_s=0.075)
    mixed = dict(flat, power_slowdown_by_duty=[[0.72, 1.105], [0.49, 1.023], [1.5, 9.0]])
    profile, _ = power.power_limit(mixed)
    assert [x for point in profile for x in point] == pytest.approx(
        [0, 1, 0.49, 1.023, 0.72, 1.105, 1, 1.11])  # sorted; a duty outside (0, 1) left out
    assert power.slowdown_at(profile, 0.0) == 1.0 and power.slowdown_at(profile, 2.0) == 1.11
    assert power.slowdown_at(profile, 0.245) == pytest.approx(1.0115)
    assert power.slowdown_at(profile, 0.86) == pytest.approx(1.1075)
    bad, _ = power.power_limit(dict(flat, power_slowdown_by_duty=[[0.5, float("nan")]]))
    assert [power.slowdown_at(bad, d) for d in (0.0, 0.5)] == pytest.approx([1.11, 1.11])
    hw = load_spec("h100_sxm")
    added = {}
    for name, B, T in (("llama3_2_1b", 8, 4096), ("olmoe_1b_7b", 16, 512)):
        cfg = ModelConfig.from_name(name).resolved("cuda")
        wl = dict(batch=B, prompt_len=T, new_tokens=64, warmup=2, repeats=5)
        cold, f, m = (perf.predict(cfg, wl, hw, c, ceilings=x) for x in (ceil, flat, mixed))
        added[name] = [(x["prefill_pred_ms"] / cold["prefill_pred_ms"] - 1) for x in (f, m)]
        assert "duty" in m["prefill_pred_basis"]
        assert m["decode_pred_ms"] == pytest.approx(cold["decode_pred_ms"], rel=1e-9)
    dense, moe = added["llama3_2_1b"], added["olmoe_1b_7b"]
    assert dense[1] > 0.9 * dense[0] > 0.04  # near the ceiling: nearly the whole slow-down
    assert 0 < moe[1] < moe[0] / 3  # about half the ceiling: a third of it or less


def test_a_graphed_decode_step_is_never_below_the_hosts_floor():
    """A decode step whose kernels take less than the measured host floor of a graphed step
    (``graph_step_<impl>``) is priced at the floor, the excess booked as launch overhead and
    said in the basis; a step above the floor is unchanged; a calibration without the entry
    prices as before."""
    import pandas as pd

    shipped = store.shipped("NVIDIA H100 80GB HBM3")
    meta, table = shipped.meta, shipped.table
    table = table[~((table.kind == "launch") & table.op.astype(str).str.startswith("graph_step"))]
    hw = load_spec("h100_sxm")
    small = ModelConfig.from_name("llama3_2_1b", n_layers=2, d_model=512, n_heads=8,
                                  n_kv_heads=2, head_dim=64, ffn_dim=1408).resolved("cuda")
    big = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    wl = dict(batch=4, prompt_len=512, new_tokens=64)
    floor = 0.3e-3
    row = {"kind": "launch", "op": "graph_step_triton", "time_s": floor, "time_s_min": floor,
           "time_s_p90": floor, "family": "launch"}
    with_floor = pricing.Calibrated(store.Calibration(
        meta, pd.concat([table, pd.DataFrame([row])], ignore_index=True)))
    without = pricing.Calibrated(store.Calibration(meta, table))
    a, b = perf.predict(small, wl, hw, without), perf.predict(small, wl, hw, with_floor)
    assert a["decode_pred_ms"] < 0.3 and b["decode_pred_ms"] == pytest.approx(0.3)
    assert b["decode_pred_ms_launch_overhead"] > a["decode_pred_ms_launch_overhead"]
    assert "host-bound step" in b["decode_pred_basis"]
    assert perf.predict(big, wl, hw, with_floor)["decode_pred_ms"] == pytest.approx(
        perf.predict(big, wl, hw, without)["decode_pred_ms"], rel=1e-9)


def test_a_wider_ffn_never_prices_a_faster_prefill():
    """GEMM shapes the calibration holds at another M only: a wider FFN of the 8B shape was
    priced 7x slower at 6144 than at 12288 (an (N, K) measured at M = 8192 alone priced its
    M = 512 GEMM at the M = 8192 time); now the nearest (N, K) calibrated around the M prices it,
    and TTFT and TPOT grow with ffn_dim."""
    c = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 128}
    rows = [perf.predict(ModelConfig.from_name("llama3_1_8b", ffn_dim=f, kernels="triton"), wl,
                         load_spec("h100_sxm"), c) for f in (4096, 6144, 8192, 12288, 16384)]
    for st in ("prefill", "decode"):
        t = [r[f"{st}_pred_ms_calibrated"] for r in rows]
        assert all(a < b for a, b in zip(t, t[1:])), (st, t)


def test_checks_are_plain_bools_for_json():
    """The targets' checks of a summary whose figures are numpy floats (as pandas gives them) are
    plain bools: the command prints and stores them as JSON (a numpy bool made it fail after a
    whole set had been measured)."""
    import json

    from sweep.analysis import validation

    s = {"all": {"decode": {"calibrated": {"n": 3, "median": np.float64(2.0), "p90": np.float64(9.0)},
                            "in_interval": np.float64(0.9), "narrow": np.float64(0.5)}}}
    got = validation.passes(s)
    assert got == {"decode_median<=3.0%": True, "decode_p90<=8.0%": False,
                   "decode_in_interval>=80%": True, "decode_half_width<=15%": False}
    assert all(type(v) is bool for v in got.values())
    json.dumps(got)


def test_qk_norm_pays_each_of_its_launches():
    """QK-norm on the Triton path is one launch a layer (``kernels.qk_norm``: both RMSNorms from
    the qkv rows and, for several rows, v copied dense; before it, five launches at batch 8 and
    two at batch 1), priced as one RMSNorm launch of its bytes, with a kernel's fixed cost (a
    microsecond or more on the shipped H100 calibration); the torch path's two norms are still
    priced launch by launch (one entry of their summed bytes priced five launches as one:
    OLMoE's decode step came out 150 us short, results/reference/moe_modules_h100.md)."""
    h100 = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    olmoe = ModelConfig.from_name("olmoe_1b_7b", kernels="triton")
    plain = olmoe.replace(qk_norm="none")
    H, Hkv, D = olmoe.n_heads, olmoe.n_kv_heads, olmoe.head_dim
    for B in (8, 1):
        got, was = (perf.kernel_list(c, B, 1, 1024, "triton") for c in (olmoe, plain))
        assert len(got) == len(was) + 1 and got[1].op == "wqkv"
        ks = [got[2]]  # right after the qkv GEMV (a like kernel elsewhere may equal it)
        assert got[:2] + got[3:] == was and [k.launches for k in ks] == [1]
        assert all(k.module == "norms_elementwise" and k.repeat == olmoe.n_layers for k in ks)
        v = B > 1  # v copied dense for several rows
        assert ks[0].bytes == 2 * B * (H + Hkv * (1 + v)) * D * 2
        assert h100.price(ks[0])[0] > 1e-6  # a kernel's fixed cost: a microsecond or more
    got, was = (perf.kernel_list(c, 8, 1, 1024, "torch") for c in (olmoe, plain))
    at = [k.op for k in got].index("wqkv") + 1
    assert got[:at] + got[at + 2:] == was  # the two norms right after the qkv projection
    assert [k.op for k in got[at:at + 2]] == ["rmsnorm"] * 2
    assert all(k.launches > 1 for k in got[at:at + 2])


def test_an_eager_host_bound_step_reaches_further_above_than_below():
    """A host-bound eager decode step's interval reaches ``EAGER_HOST_SLOWER`` x its host time
    above the prediction and ``EAGER_HOST_UNCERTAINTY`` x below (the development set's eager steps
    measured 1.28-2.50x their price on the shipped fixed costs): the H100's eager Llama-3.2-1B
    step at batch 2 is priced about 6.5 ms, its interval reaching past 2x that. A graphed step's
    interval stays symmetric."""
    spec = load_spec("h100_sxm")
    cal = pricing.Calibrated(store.shipped_for(spec))
    design = ModelConfig.from_name("llama3_2_1b").replace(kernels="triton")
    wl = {"batch": 2, "prompt_len": 256, "new_tokens": 64}
    eager = perf.predict(design, wl, spec, calibration=cal, mode="eager")
    p, lo, hi = (eager[f"decode_pred_ms_{k}"] for k in ("calibrated", "lo", "hi"))
    assert hi - p > 2 * (p - lo) and hi > 2.0 * p and lo > 0.4 * p
    assert hi - p >= perf.EAGER_HOST_SLOWER * 0.9 * p  # the host's time is most of the step
    graphed = perf.predict(design, wl, spec, calibration=cal, mode="cudagraph")
    p, lo, hi = (graphed[f"decode_pred_ms_{k}"] for k in ("calibrated", "lo", "hi"))
    assert hi - p == pytest.approx(p - lo) and hi < 1.2 * p
